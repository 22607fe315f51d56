package main

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// llama.cpp built without the SIMD the CPU has, or decoding at a speed the memory
// bandwidth cannot explain, gets no ratio; a fair one does.
func TestLlamaReferenceRefused(t *testing.T) {
	full := "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | FMA = 1 | AVX512 = 1 | OPENMP = 1 |"
	noAVX2 := "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 0 | OPENMP = 1 |"
	x86 := machineFigures{SIMD: []string{"avx2", "fma", "avx512f"}, BandwidthGBs: 20}
	arm := machineFigures{SIMD: []string{"asimd"}, BandwidthGBs: 20}
	side := func(info string, frac float64) *inferSide {
		return &inferSide{SystemInfo: info, Threads: 2, PP: inferFigure{CPUUtil: 1.9}, TG: []inferFigure{{Batch: 1, BandwidthFraction: frac}}}
	}
	oneThread := side(full, 0.6)
	oneThread.PP.CPUUtil = 1.0
	goSide := &inferSide{Threads: 2, PP: inferFigure{CPUUtil: 1.8}}
	starvedGo := &inferSide{Threads: 2, PP: inferFigure{CPUUtil: 1.1}}
	for _, c := range []struct {
		name string
		s    *inferSide
		m    machineFigures
		want string // "" for no refusal
	}{
		{"fair", side(full, 0.6), x86, ""},
		{"no AVX2", side(noAVX2, 0.6), x86, "without the CPU's avx2"},
		{"no AVX-512", side(strings.Replace(full, "AVX512 = 1", "AVX512 = 0", 1), 0.6), x86, "avx512f"},
		{"no NEON on arm64", side("CPU : NEON = 0 | ARM_FMA = 1 |", 0.6), arm, "asimd"},
		{"NEON", side("CPU : NEON = 1 | ARM_FMA = 1 |", 0.6), arm, ""},
		{"starved", side(full, 0.01), x86, "something else bounds it"},
		{"impossible", side(full, 2), x86, "cannot have read"},
		{"one thread", oneThread, x86, "not honoured"},
	} {
		got := llamaRefused(c.s, goSide, c.m)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: refusal %q, want %q", c.name, got, c.want)
		}
	}
	// Both sides starved alike is the machine, not llama.cpp: no refusal.
	if got := llamaRefused(oneThread, starvedGo, x86); got != "" {
		t.Errorf("both sides starved: refused %q", got)
	}
}

// A format the engine cannot hold its CPU weights in is refused by name rather than
// measured on one side only.
func TestWeightsTuftLacksAreRefused(t *testing.T) {
	for _, w := range weightFormats {
		err := tuftHasWeights(w)
		if slices.Contains(tuftWeightFormats, w) != (err == nil) {
			t.Fatalf("--weights %s: %v", w, err)
		}
		if err != nil && !strings.Contains(err.Error(), "--weights "+w) {
			t.Fatalf("error does not name the format: %v", err)
		}
	}
	for _, w := range weightFormats {
		if slices.Contains(tuftWeightFormats, w) {
			continue
		}
		// Refused before anything is measured or converted.
		err := runBench([]string{"engine", "--reference", "llama.cpp", "--weights", w}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--weights "+w) {
			t.Fatalf("--weights %s: got %v", w, err)
		}
		err = runBench([]string{"engine", "--weights", w}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--weights "+w) {
			t.Fatalf("--reference torch --weights %s: got %v", w, err)
		}
	}
}

// The llama.cpp reference end to end on SmolLM2-135M-Instruct (F32 on both sides), with
// few tokens: both sides report every figure, llama.cpp its SIMD path, and the ratio is
// given unless the bandwidth check refused it (a shared machine can starve a short run;
// a missing SIMD path is a failure).
func TestBenchLlamaCpp(t *testing.T) {
	if testing.Short() {
		t.Skip("loads SmolLM2-135M twice")
	}
	if _, _, why := findLlamaRef("", ""); why != "" {
		t.Skip("llama.cpp reference unavailable: " + why)
	}
	smallMachine(t)
	var out bytes.Buffer
	if err := runBench([]string{"engine", "--reference", "llama.cpp", "--new-tokens", "4", "--pp-tokens", "16", "--batches", "1,3",
		"--repeats", "1", "--json"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var r llamaReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if r.Llama == nil || r.Machine.Passes != 2 || r.Layers != 30 || r.Weights != "f32" || !strings.HasSuffix(r.Model, ".f32.gguf") {
		t.Fatalf("report %+v", r)
	}
	for _, s := range []*inferSide{&r.Go, r.Llama} {
		if s.PP.Tokens != 16 || s.PP.TokensPerS <= 0 || s.PP.GEMMFraction <= 0 || s.Threads != runtime.GOMAXPROCS(0) || s.WeightBytesPerStep < 500e6 {
			t.Fatalf("%s: %+v", s.Impl, s)
		}
		for _, b := range []int{1, 3} {
			f := s.tg(b)
			if f == nil || f.Tokens != 4*b || f.Steps != 4 || f.TokensPerS <= 0 || f.BandwidthFraction <= 0 || f.ReadFraction <= 0 || f.ReadGBs <= 0 {
				t.Fatalf("%s batch %d: %+v", s.Impl, b, f)
			}
		}
	}
	policies := mapSlice(waitPolicies(), waitPolicyName)
	for _, f := range append([]inferFigure{r.Llama.PP}, r.Llama.TG...) {
		if !slices.Contains(policies, f.WaitPolicy) {
			t.Fatalf("llama.cpp figure %+v: policy not one of %v", f, policies)
		}
	}
	if runtime.GOARCH == "amd64" && !strings.Contains(r.Llama.SystemInfo, "AVX2 = 1") && slices.Contains(r.Machine.SIMD, "avx2") {
		t.Fatalf("llama.cpp system info %q", r.Llama.SystemInfo)
	}
	switch {
	case r.Refused == "":
		if r.Ratios["tg_b1_tokens_per_s"] <= 0 || r.Ratios["tg_b3_tokens_per_s"] <= 0 || r.Ratios["pp_tokens_per_s"] <= 0 {
			t.Fatalf("ratios %v", r.Ratios)
		}
	case !strings.Contains(r.Refused, "bandwidth") && !strings.Contains(r.Refused, "not honoured"):
		// The bandwidth and threads checks read the machine's load (a shared CI machine can
		// starve one side); TestLlamaReferenceRefused tests them. Any other refusal is a bug.
		t.Fatalf("refused: %s", r.Refused)
	default:
		t.Logf("the reference was refused on this machine's load: %s", r.Refused)
	}
}

// Each of the reference's figures is the faster run's, with the policy it ran under.
func TestLlamaReferenceKeepsFaster(t *testing.T) {
	fig := func(batch int, tps float64, policy string) inferFigure {
		return inferFigure{Batch: batch, TokensPerS: tps, WaitPolicy: policy}
	}
	passive := &inferSide{PeakRSSMiB: 300, PP: fig(0, 700, "PASSIVE"), TG: []inferFigure{fig(1, 42, "PASSIVE"), fig(16, 260, "PASSIVE")}}
	spin := &inferSide{PeakRSSMiB: 310, PP: fig(0, 650, "default"), TG: []inferFigure{fig(16, 250, "default"), fig(1, 110, "default")}}
	passive.keepFaster(spin)
	want := &inferSide{PeakRSSMiB: 310, PP: fig(0, 700, "PASSIVE"), TG: []inferFigure{fig(1, 110, "default"), fig(16, 260, "PASSIVE")}}
	if !reflect.DeepEqual(passive, want) {
		t.Fatalf("kept %+v, want %+v", passive, want)
	}
	t.Setenv("OMP_WAIT_POLICY", "ACTIVE")
	if got := waitPolicies(); !slices.Equal(got, []string{"ACTIVE"}) {
		t.Fatalf("with the caller's OMP_WAIT_POLICY: policies %v, want only it", got)
	}
	if env := referenceEnv("", "PASSIVE"); slices.Contains(env, "OMP_WAIT_POLICY=PASSIVE") {
		t.Fatal("referenceEnv overrode the caller's OMP_WAIT_POLICY")
	}
}

// --weights q4_k is llama.cpp's Q4_K_M file (cached under its own name), --tuft-weights
// a format of tuft's own (refused by name when unknown), and the table prints both
// sides' bytes per pass and their ratio.
func TestBenchLlamaQ4KMFlags(t *testing.T) {
	if got := fileTag("q4_k"); got != "q4_k_m" {
		t.Errorf("fileTag(q4_k) = %q", got)
	}
	err := runBench([]string{"engine", "--reference", "llama.cpp", "--weights", "q4_k", "--tuft-weights", "q3_k"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--tuft-weights") {
		t.Fatalf("--tuft-weights q3_k: %v", err)
	}
	// QLoRA figures run the engine alone: PyTorch cannot be asked for on a quantised base.
	err = runBench([]string{"engine", "--weights", "q4_k", "--torch", "on"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--torch off") {
		t.Fatalf("--weights q4_k --torch on: %v", err)
	}
	r := &llamaReport{Model: "m.q4_k_m.gguf", Weights: "q4_k", TuftModel: "m.q4_1.gguf", TuftWeights: "q4_1", Batch: 16,
		Go:    inferSide{Impl: "go", WeightBytesPerStep: 84e6, TG: []inferFigure{{Batch: 1, TokensPerS: 10}}},
		Llama: &inferSide{Impl: "llama.cpp", WeightBytesPerStep: 105e6, TG: []inferFigure{{Batch: 1, TokensPerS: 10}}}}
	var out bytes.Buffer
	printLlama(&out, r)
	for _, want := range []string{"tuft 84.0 MB (q4_1), llama.cpp 105.0 MB (q4_k_m): tuft/llama.cpp 0.800", "tuft computes in q4_1 on m.q4_1.gguf"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
