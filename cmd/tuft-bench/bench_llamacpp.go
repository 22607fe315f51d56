package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
)

// `tuft-bench engine --reference llama.cpp` measures inference on a GGUF file against
// llama.cpp (llama-cpp-python's C API, tools/llamacppref/bench.py) on the same file:
// prompt processing, decode at batch 1 and at batch 16, on the same number of threads,
// each as tokens/s and as a fraction of the machine's memory bandwidth (decode) or GEMM
// peak (prompt processing).

// weightFormats are the --weights values: the precision both sides compute with, named
// as engine.cpu_weight_format names them ("q4" is accepted for q4_1). q4_k is
// llama.cpp's Q4_K_M quantisation of the model (llama_model_quantize: Q4_K mixed with
// Q6_K, and Q5_0/Q8_0 for rows that are not whole 256-blocks), whose blocks the engine
// in q4_k keeps as they are.
var weightFormats = []string{"f32", "bf16", "q8_0", "q4_1", "q4_k"}

// tuftWeightFormats are the formats the engine's CPU path holds weights in
// (engine.cpu_weight_format); tuftWeightOptions opens the CPU device in the chosen one.
var tuftWeightFormats = []string{"f32", "bf16", "q8_0", "q4_1", "q4_k"}

// fileTag names the converted GGUF of each --weights format (bench.py convert).
func fileTag(w string) string {
	if w == "q4_k" {
		return "q4_k_m"
	}
	return w
}

// weightFormat reads a --weights value.
func weightFormat(s string) (string, error) {
	if s == "q4" {
		s = "q4_1"
	}
	if !slices.Contains(weightFormats, s) {
		return "", fmt.Errorf("--weights %q: want one of %s (q4 is q4_1)", s, strings.Join(weightFormats, ", "))
	}
	return s, nil
}

// inferFigure is one measured speed.
type inferFigure struct {
	Batch      int     `json:"batch,omitempty"`
	Steps      int     `json:"steps,omitempty"` // forward passes (decode steps)
	Tokens     int     `json:"tokens"`
	Seconds    float64 `json:"seconds"`
	TokensPerS float64 `json:"tokens_per_s"`
	// CPUUtil is the process's CPU time over the wall time: the threads it kept busy.
	CPUUtil float64 `json:"cpu_util"`
	// Fraction of the machine's memory bandwidth (decode) or measured GEMM peak (prompt
	// processing) the figure reaches; filled in by tuft-bench, not by the reference.
	BandwidthFraction float64 `json:"bandwidth_fraction,omitempty"`
	GEMMFraction      float64 `json:"gemm_fraction,omitempty"`
	// ReadGBs and ReadFraction (decode) are the weights' bytes read per second and their
	// share of the read-only pass alone (mem_read_gb_s): decode only reads its weights,
	// and on the KVM guests of docs/performance.md two cores read at most about 30 GB/s
	// where the triad, counted as three streams, reports 40–60.
	ReadGBs      float64 `json:"read_gb_s,omitempty"`
	ReadFraction float64 `json:"read_fraction,omitempty"`
	// WaitPolicy is the OMP_WAIT_POLICY of the reference's run this figure comes from
	// (runLlamaRef; "default" is libgomp's own).
	WaitPolicy string `json:"omp_wait_policy,omitempty"`
}

// inferSide is one implementation's inference figures (tuft's and the reference's
// JSON have this shape).
type inferSide struct {
	Impl           string        `json:"impl"`
	Version        string        `json:"llama_cpp_version,omitempty"`
	Python         string        `json:"python,omitempty"`
	SystemInfo     string        `json:"system_info,omitempty"` // llama_print_system_info()
	OMPWaitPolicy  string        `json:"omp_wait_policy,omitempty"`
	Threads        int           `json:"threads"`
	Model          string        `json:"model"`
	ModelSizeBytes int64         `json:"model_size_bytes"` // bytes of every weight tensor
	NParams        int64         `json:"n_params,omitempty"`
	LoadS          float64       `json:"load_s,omitempty"`
	PP             inferFigure   `json:"pp"`
	TG             []inferFigure `json:"tg"`
	PeakRSSMiB     float64       `json:"peak_rss_mib,omitempty"`
	// WeightBytesPerStep is the bytes of weights one forward pass reads (every matrix
	// but the embedding table, which only gives rows, unless it is also the LM head).
	WeightBytesPerStep float64 `json:"weight_bytes_per_step"`
}

func (s *inferSide) tg(batch int) *inferFigure {
	for i := range s.TG {
		if s.TG[i].Batch == batch {
			return &s.TG[i]
		}
	}
	return nil
}

// llamaReport is the output of `tuft-bench engine --reference llama.cpp`.
type llamaReport struct {
	Machine     machineFigures `json:"machine"`
	SourceModel string         `json:"source_model"` // the GGUF given (or SmolLM2's)
	Model       string         `json:"model"`        // the GGUF llama.cpp loaded (and tuft, unless TuftModel)
	Weights     string         `json:"weights"`
	// TuftModel and TuftWeights are tuft's file and format when --tuft-weights differs
	// from --weights (our 4-bit format against llama.cpp's Q4_K_M, say).
	TuftModel    string             `json:"tuft_model,omitempty"`
	TuftWeights  string             `json:"tuft_weights,omitempty"`
	Arch         string             `json:"arch"`
	Layers       int                `json:"layers"`
	Hidden       int                `json:"hidden"`
	Vocab        int                `json:"vocab"`
	PromptTokens int                `json:"prompt_tokens"` // before decode
	NewTokens    int                `json:"new_tokens"`    // decode steps
	PPTokens     int                `json:"pp_tokens"`
	Batch        int                `json:"batch"`
	Go           inferSide          `json:"go"`
	Llama        *inferSide         `json:"llama_cpp"`
	Ratios       map[string]float64 `json:"ratios_go_over_llama_cpp,omitempty"`
	Refused      string             `json:"ratios_refused,omitempty"`
	Warnings     []string           `json:"warnings,omitempty"`
}

type llamaOptions struct {
	model, weights, python, script string
	tuftWeights                    string // tuft's format ("" or weights: the same file as llama.cpp's)
	newTokens, ppTokens, batch     int
	repeats                        int
	jsonOut                        bool
}

const llamaPromptTokens = 8

func runBenchLlama(o llamaOptions, stdout, stderr io.Writer) error {
	logf := progressLog(stderr)
	if o.tuftWeights == "" {
		o.tuftWeights = o.weights
	}
	if err := tuftHasWeights(o.tuftWeights); err != nil {
		return err
	}
	python, script, why := findLlamaRef(o.python, o.script)
	if why != "" {
		return fmt.Errorf("llama.cpp reference unavailable: %s", why)
	}
	src := o.model
	if src == "" {
		var err error
		if src, err = defaultGGUF(); err != nil {
			return err
		}
	}
	if !engine.IsGGUF(src) {
		return fmt.Errorf("--model %s: --reference llama.cpp needs a .gguf file", src)
	}
	path, err := comparedGGUF(python, script, src, o.weights, logf)
	if err != nil {
		return err
	}
	rep := llamaReport{SourceModel: src, Model: path, Weights: o.weights, PromptTokens: llamaPromptTokens,
		NewTokens: o.newTokens, PPTokens: o.ppTokens, Batch: o.batch}
	tuftPath, to := path, o
	if o.tuftWeights != o.weights {
		if tuftPath, err = comparedGGUF(python, script, src, o.tuftWeights, logf); err != nil {
			return err
		}
		rep.TuftModel, rep.TuftWeights, to.weights = tuftPath, o.tuftWeights, o.tuftWeights
	}
	logf("measuring the machine (memory bandwidth, GEMM peak)")
	rep.Machine = measureMachine()
	printMachine(stderr, rep.Machine)

	goSide, cfg, err := benchGoInfer(context.Background(), tuftPath, to, logf)
	if err != nil {
		return err
	}
	rep.Go = *goSide
	rep.Arch, rep.Layers, rep.Hidden, rep.Vocab = cfg.Arch, cfg.Layers, cfg.Hidden, cfg.VocabSize
	runtime.GC()

	args := []string{script, "run", "--model", path, "--threads", fmt.Sprint(rep.Machine.Threads),
		"--prompt", fmt.Sprint(llamaPromptTokens), "--new-tokens", fmt.Sprint(o.newTokens), "--batch", fmt.Sprint(o.batch),
		"--pp-tokens", fmt.Sprint(o.ppTokens), "--repeats", fmt.Sprint(o.repeats)}
	ls, err := runLlamaRef(python, args, o.batch, stderr, logf)
	if err != nil {
		return err
	}
	// Bytes per forward pass: llama.cpp's tensors in the proportion a pass reads.
	ls.WeightBytesPerStep = float64(ls.ModelSizeBytes) * readParams(cfg) / float64(max(ls.NParams, 1))
	rep.Llama = ls
	logf("measuring the machine again (the best of both measurements is kept)")
	rep.Machine.remeasure()
	for _, s := range []*inferSide{&rep.Go, rep.Llama} {
		fractions(s, cfg, rep.Machine)
	}
	rep.Refused = llamaRefused(ls, &rep.Go, rep.Machine)
	rep.Warnings = threadWarnings(&rep)
	if rep.Refused == "" {
		rep.Ratios = inferRatios(&rep.Go, rep.Llama)
	}
	return writeReport(stdout, o.jsonOut, &rep, printLlama)
}

// tuftWeightOptions are the load options that make the engine hold its CPU weights in
// format w. When the CPU weight formats land (engine.cpu_weight_format), this opens
// engine.OpenDevice("cpu", engine.DeviceOptions{CPUWeightFormat: f}) for the parsed f
// and returns engine.OnDevice of it.
func tuftWeightOptions(w string) ([]engine.Option, error) {
	if err := tuftHasWeights(w); err != nil {
		return nil, err
	}
	f, err := engine.ParseWeightFormat(w)
	if err != nil {
		return nil, fmt.Errorf("--weights: %w", err)
	}
	dev, _, err := engine.OpenDevice("cpu", engine.DeviceOptions{CPUWeightFormat: f, CPUPrepackBytes: config.Default("").Engine.CPUPrepackBytes})
	if err != nil {
		return nil, err
	}
	return []engine.Option{engine.OnDevice(dev)}, nil
}

// tuftHasWeights refuses a --weights format the engine's CPU path cannot hold weights
// in: a one-sided figure is no comparison.
func tuftHasWeights(w string) error {
	if !slices.Contains(tuftWeightFormats, w) {
		return fmt.Errorf("--weights %s: the engine's CPU path holds weights only as %s today, so tuft cannot compute in %s",
			w, strings.Join(tuftWeightFormats, ", "), w)
	}
	return nil
}

// benchGoInfer loads the GGUF on the CPU and measures prompt processing (best of
// o.repeats for each run of the reference) and decode at batch 1 and o.batch, through
// Model.SampleWithHooks: the prefill phase is prompt processing, the decode phase
// (o.newTokens steps after the token drawn from the prefill) is decode. Greedy (temperature 0), no stop at EOS.
func benchGoInfer(ctx context.Context, path string, o llamaOptions, logf func(string, ...any)) (*inferSide, engine.Config, error) {
	side := &inferSide{Impl: "go", Threads: runtime.GOMAXPROCS(0), Model: path}
	t0 := time.Now()
	opts, err := tuftWeightOptions(o.weights)
	if err != nil {
		return nil, engine.Config{}, err
	}
	m, err := engine.Load(path, "bench", opts...)
	if err != nil {
		return nil, engine.Config{}, err
	}
	side.LoadS = time.Since(t0).Seconds()
	cfg := m.Cfg
	if llamaPromptTokens+o.newTokens+1 > cfg.MaxPositions || o.ppTokens > cfg.MaxPositions {
		return nil, cfg, fmt.Errorf("the model has %d positions: --pp-tokens %d or %d + --new-tokens %d is too many",
			cfg.MaxPositions, o.ppTokens, llamaPromptTokens, o.newTokens)
	}
	m.Cfg.EOSTokenIDs = nil
	side.NParams = int64(totalParams(cfg))
	total, perPass := m.WeightBytes() // the matrices as stored (a Q4_K_M file's mix of blocks too)
	side.ModelSizeBytes, side.WeightBytesPerStep = total, float64(perPass)
	logf("tuft loaded %s in %.2fs", path, side.LoadS)

	// phases runs one request and returns the wall and CPU seconds of each phase.
	type span struct{ wall, cpu float64 }
	phases := func(prompt []int32, samples, maxTokens int) (map[string]span, engine.SampleResult, error) {
		out := map[string]span{}
		var tw time.Time
		var tc float64
		h := engine.SampleHooks{OnPhase: func(name string, start bool) {
			if start {
				tw, tc = time.Now(), cpuSeconds()
				return
			}
			out[name] = span{time.Since(tw).Seconds(), cpuSeconds() - tc}
		}}
		seed := int64(0)
		res, err := m.SampleWithHooks(ctx, nil, engine.SampleRequest{Prompt: prompt, NumSamples: samples,
			Params: engine.SampleParams{MaxTokens: maxTokens, Temperature: 0, TopK: -1, TopP: 1, Seed: &seed}}, h)
		return out, res, err
	}
	prompt := benchTokens(llamaPromptTokens, cfg.VocabSize, 101)
	pp := benchTokens(o.ppTokens, cfg.VocabSize, 101)
	// Warm-up: each shape once.
	for _, w := range []struct {
		p       []int32
		n, toks int
	}{{pp, 1, 1}, {prompt, 1, 3}, {prompt, o.batch, 3}} {
		if _, _, err := phases(w.p, w.n, w.toks); err != nil {
			return nil, cfg, err
		}
	}
	// As many tries as the reference gets: o.repeats in each of its runs (runLlamaRef).
	for r := 0; r < o.repeats*len(waitPolicies()); r++ {
		ph, _, err := phases(pp, 1, 1)
		if err != nil {
			return nil, cfg, err
		}
		s := ph["prefill"]
		if r == 0 || s.wall < side.PP.Seconds {
			side.PP = inferFigure{Tokens: o.ppTokens, Seconds: s.wall, TokensPerS: float64(o.ppTokens) / s.wall, CPUUtil: s.cpu / s.wall}
		}
	}
	logf("tuft prompt processing %d tokens: %.1f tokens/s", o.ppTokens, side.PP.TokensPerS)
	for _, b := range uniqueInts(1, o.batch) {
		ph, res, err := phases(prompt, b, o.newTokens+1)
		if err != nil {
			return nil, cfg, err
		}
		if res.OutputTokens != b*(o.newTokens+1) {
			return nil, cfg, fmt.Errorf("tuft sampled %d tokens at batch %d, want %d", res.OutputTokens, b, b*(o.newTokens+1))
		}
		s := ph["decode"]
		n := b * o.newTokens
		side.TG = append(side.TG, inferFigure{Batch: b, Steps: o.newTokens, Tokens: n, Seconds: s.wall,
			TokensPerS: float64(n) / s.wall, CPUUtil: s.cpu / s.wall})
		logf("tuft decode batch %d: %.1f tokens/s", b, float64(n)/s.wall)
	}
	side.PeakRSSMiB = maxRSSMiB()
	return side, cfg, nil
}

func uniqueInts(xs ...int) []int {
	var out []int
	for _, x := range xs {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// fractions fills each figure's share of the machine: decode's bytes of weights read
// per second over the memory bandwidth, prompt processing's FLOP/s over the GEMM peak.
func fractions(s *inferSide, c engine.Config, m machineFigures) {
	if m.GEMMGFlops > 0 && s.PP.Seconds > 0 {
		s.PP.GEMMFraction = ppFLOPs(c, s.PP.Tokens) / s.PP.Seconds / (m.GEMMGFlops * 1e9)
	}
	for i := range s.TG {
		f := &s.TG[i]
		if f.Seconds > 0 {
			f.ReadGBs = s.WeightBytesPerStep * float64(f.Steps) / f.Seconds / 1e9
		}
		if m.BandwidthGBs > 0 {
			f.BandwidthFraction = f.ReadGBs / m.BandwidthGBs
		}
		if m.ReadGBs > 0 {
			f.ReadFraction = f.ReadGBs / m.ReadGBs
		}
	}
}

// threadWarnings notes a side that kept fewer threads busy than it was given in its
// most parallel phase (prompt processing): on a machine others share, that is
// contention, and its figures are low for a reason beside the code.
func threadWarnings(r *llamaReport) []string {
	var out []string
	for _, s := range []*inferSide{&r.Go, r.Llama} {
		if s == nil || s.Threads < 2 || s.PP.CPUUtil == 0 {
			continue
		}
		if s.PP.CPUUtil < 0.75*float64(s.Threads) {
			out = append(out, fmt.Sprintf("%s kept %.2f of its %d threads busy in prompt processing (CPU time ÷ wall): the machine is shared or threads are not honoured",
				s.Impl, s.PP.CPUUtil, s.Threads))
		}
	}
	return out
}

func inferRatios(g, l *inferSide) map[string]float64 {
	r := map[string]float64{}
	if l.PP.TokensPerS > 0 {
		r["pp_tokens_per_s"] = g.PP.TokensPerS / l.PP.TokensPerS
	}
	for _, f := range g.TG {
		if lf := l.tg(f.Batch); lf != nil && lf.TokensPerS > 0 {
			r[fmt.Sprintf("tg_b%d_tokens_per_s", f.Batch)] = f.TokensPerS / lf.TokensPerS
		}
	}
	return r
}

func printLlama(w io.Writer, r *llamaReport) {
	l := r.Llama
	fmt.Fprintf(w, "tuft-bench engine --reference llama.cpp: %s (%s, %d layers, hidden %d, vocab %d), weights %s\n",
		filepath.Base(r.Model), r.Arch, r.Layers, r.Hidden, r.Vocab, fileTag(r.Weights))
	tuftWeights := fileTag(r.Weights)
	if r.TuftWeights != "" {
		tuftWeights = r.TuftWeights
		fmt.Fprintf(w, "tuft computes in %s on %s\n", r.TuftWeights, filepath.Base(r.TuftModel))
	}
	fmt.Fprintf(w, "source %s\n", r.SourceModel)
	printMachine(w, r.Machine)
	fmt.Fprintf(w, "reference: llama.cpp via llama-cpp-python %s (Python %s), %d threads, OMP_WAIT_POLICY %s: each figure from the faster run (prompt %s, %s)\n",
		l.Version, l.Python, l.Threads, l.OMPWaitPolicy, l.PP.WaitPolicy, strings.Join(mapSlice(l.TG, func(f inferFigure) string {
			return fmt.Sprintf("batch %d %s", f.Batch, f.WaitPolicy)
		}), ", "))
	fmt.Fprintf(w, "llama.cpp system info: %s\n", l.SystemInfo)
	fmt.Fprintf(w, "weights read per forward pass: tuft %.1f MB (%s), llama.cpp %.1f MB (%s): tuft/llama.cpp %.3f\n",
		r.Go.WeightBytesPerStep/1e6, tuftWeights, l.WeightBytesPerStep/1e6, fileTag(r.Weights), r.Go.WeightBytesPerStep/l.WeightBytesPerStep)
	if r.Refused != "" {
		fmt.Fprintf(w, "tuft/llama.cpp ratios not printed: %s\n", r.Refused)
	}
	for _, x := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", x)
	}
	type row struct{ label, g, gf, l, lf, ratio string }
	rows := []row{{"", "tuft", "of peak", "llama.cpp", "of peak", "tuft/llama"}}
	pct := func(x float64) string {
		if x == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*x)
	}
	add := func(label string, g, l *inferFigure, ratioKey string, frac func(*inferFigure) float64) {
		rw := row{label: label, g: fmt.Sprintf("%.1f", g.TokensPerS), gf: pct(frac(g))}
		if l != nil {
			rw.l, rw.lf = fmt.Sprintf("%.1f", l.TokensPerS), pct(frac(l))
			rw.ratio = fmtRatio(r.Ratios[ratioKey])
		}
		rows = append(rows, rw)
	}
	add(fmt.Sprintf("prompt processing, %d tokens: tokens/s (of GEMM peak)", r.PPTokens), &r.Go.PP, &l.PP, "pp_tokens_per_s",
		func(f *inferFigure) float64 { return f.GEMMFraction })
	for _, g := range r.Go.TG {
		add(fmt.Sprintf("decode batch %d, %d steps: tokens/s (of bandwidth)", g.Batch, g.Steps), &g, l.tg(g.Batch),
			fmt.Sprintf("tg_b%d_tokens_per_s", g.Batch), func(f *inferFigure) float64 { return f.BandwidthFraction })
	}
	util := row{label: "threads busy in prompt processing (CPU ÷ wall)", g: fmt.Sprintf("%.2f", r.Go.PP.CPUUtil), l: fmt.Sprintf("%.2f", l.PP.CPUUtil)}
	rows = append(rows, util)
	width := 0
	for _, rw := range rows {
		width = max(width, len(rw.label))
	}
	fmt.Fprintln(w)
	for _, rw := range rows {
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("%-*s  %9s %8s  %9s %8s  %10s", width, rw.label, rw.g, rw.gf, rw.l, rw.lf, rw.ratio), " "))
	}
	fmt.Fprintln(w)
	same := "Same GGUF on both sides"
	if r.TuftModel != "" {
		same = "tuft on its own copy in " + r.TuftWeights + ", llama.cpp on " + fileTag(r.Weights) + " (same source)"
	}
	fmt.Fprintf(w, same+"; decode after a %d-token prompt, greedy, no stop; batch %d shares the prompt's cache (forked).\n", r.PromptTokens, r.Batch)
	if g, lt := r.Go.tg(1), l.tg(1); g != nil {
		fmt.Fprintf(w, "Batch-1 weight reads: tuft %.1f GB/s (%.1f%% of the read-only pass's %.1f GB/s)", g.ReadGBs, 100*g.ReadFraction, r.Machine.ReadGBs)
		if lt != nil {
			fmt.Fprintf(w, ", llama.cpp %.1f GB/s (%.1f%%)", lt.ReadGBs, 100*lt.ReadFraction)
		}
		fmt.Fprintln(w, ".")
	}
	fmt.Fprintln(w, "Bandwidth fraction: bytes of weights per forward pass × passes/s ÷ memory bandwidth. GEMM fraction: FLOPs ÷ s ÷ measured GEMM peak.")
}
