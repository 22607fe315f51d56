package export

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/gguf"
)

var (
	presetOnce sync.Once
	presetDir  string
	presetErr  error
)

// tiny is the built-in tiny preset (a llama with tied embeddings), written once.
func tiny(t *testing.T) (*engine.Model, string) {
	t.Helper()
	presetOnce.Do(func() {
		presetDir, presetErr = os.MkdirTemp("", "tuft-export-tiny-")
		if presetErr == nil {
			presetErr = engine.WritePreset("tiny", presetDir)
		}
	})
	if presetErr != nil {
		t.Fatal(presetErr)
	}
	m, err := engine.Load(presetDir, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	return m, presetDir
}

// trained saves an adapter with random non-zero A and B (as training leaves them) and
// returns it with its checkpoint directory.
func trained(t *testing.T, m *engine.Model, cfg engine.LoraConfig) (*engine.Adapter, string) {
	t.Helper()
	a, err := m.NewAdapter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, uint64(cfg.Rank)))
	fill := func(p *engine.LoraPair[float32]) {
		for i := range p.B {
			p.B[i] = float32(rng.NormFloat64() * 0.05)
		}
	}
	for l := range a.W.Layers {
		for _, p := range a.W.Layers[l] {
			if p != nil {
				fill(p)
			}
		}
	}
	if a.W.LMHead != nil {
		fill(a.W.LMHead)
	}
	if err := m.AdapterFromHost(a); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := m.SaveAdapter(a, dir, true); err != nil {
		t.Fatal(err)
	}
	return a, dir
}

var probe = []int32{1, 50, 7, 300, 12, 99, 42, 5, 17, 260, 3, 77}

// logprobs are the model's (with adapter a, or a fresh one) log-probabilities of each
// next token of probe.
func logprobs(t *testing.T, m *engine.Model, a *engine.Adapter) []float32 {
	t.Helper()
	if a == nil {
		var err error
		if a, err = m.NewAdapter(engine.LoraConfig{Rank: 1, TrainAttn: true}); err != nil {
			t.Fatal(err)
		}
	}
	tgt := make([]int64, len(probe)-1)
	for i := range tgt {
		tgt[i] = int64(probe[i+1])
	}
	res, err := m.ForwardBackward(context.Background(), a, engine.ForwardRequest{LossFn: "cross_entropy",
		Data: []engine.Datum{{Tokens: probe[:len(probe)-1], LossInputs: map[string]engine.Tensor{
			"target_tokens": {DType: engine.Int64, Shape: []int{len(tgt)}, I64: tgt}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return res.Outputs[0]["logprobs"].F32
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// What each format does with each module TuFT trains: the vLLM/llama.cpp adapter rules.
func TestCheckRules(t *testing.T) {
	all := []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
	cases := []struct {
		format  Format
		mods    []string
		refused string // "" when accepted
	}{
		{PEFT, all, ""},
		{PEFT, []string{"q_proj", "v_proj"}, ""},
		{PEFT, append(all, "lm_head"), "vLLM"},
		{PEFT, []string{"embed_tokens"}, "not one TuFT trains"},
		{GGUFLoRA, all, ""},
		{GGUFLoRA, []string{"lm_head"}, "merged model instead"},
		{HF, append(all, "lm_head"), ""},
		{GGUF, append(all, "lm_head"), ""},
		{GGUF, []string{"wte"}, "not one TuFT trains"},
	}
	for _, c := range cases {
		err := Check(c.format, c.mods)
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s %v: refused: %v", c.format, c.mods, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s %v: got %v, want a refusal saying %q", c.format, c.mods, err, c.refused)
		case err != nil:
			if _, ok := err.(*engine.InputError); !ok {
				t.Errorf("%s %v: a refusal is an InputError (a 400), got %T", c.format, c.mods, err)
			}
		}
	}
	if _, err := ParseFormat("onnx"); err == nil || !strings.Contains(err.Error(), `"onnx"`) {
		t.Errorf("ParseFormat(onnx) = %v", err)
	}
	if _, err := ParseQuant(GGUF, "q4_0"); err == nil || !strings.Contains(err.Error(), `"q4_0"`) {
		t.Errorf("ParseQuant(q4_0) = %v", err)
	}
	if _, err := ParseQuant(HF, "q8_0"); err == nil {
		t.Error("hf took a quant")
	}
	for _, name := range []string{
		"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", "base_model.model.model.layers.11.mlp.down_proj.lora_B.weight",
	} {
		if !vllmTensorName.MatchString(name) {
			t.Errorf("%s is refused", name)
		}
	}
	for _, name := range []string{"base_model.model.lm_head.lora_A.weight", "base_model.model.model.embed_tokens.lora_embedding_A",
		"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight.exp_avg"} {
		if vllmTensorName.MatchString(name) {
			t.Errorf("%s is accepted", name)
		}
	}
}

func TestPermuteRows(t *testing.T) {
	// One head of 4 dimensions, rows of 2 columns: rows 0,1 | 2,3 pair as (0,2), (1,3).
	got := permuteRows([]float32{0, 0, 1, 1, 2, 2, 3, 3}, 1, 2)
	want := []float32{0, 0, 2, 2, 1, 1, 3, 3}
	if maxDiff(got, want) != 0 {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Two heads: each permuted within itself.
	got = permuteRows([]float32{0, 1, 2, 3, 4, 5, 6, 7}, 2, 1)
	if want := []float32{0, 2, 1, 3, 4, 6, 5, 7}; maxDiff(got, want) != 0 {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// The merged weights compute what the base with the adapter computes, and the hf export
// loads back (bfloat16) within bfloat16's rounding.
func TestMergeAndHFExport(t *testing.T) {
	m, base := tiny(t)
	a, ckpt := trained(t, m, engine.LoraConfig{Rank: 4, Alpha: 8, Seed: 3, TrainAttn: true, TrainMLP: true, TrainUnembed: true})
	want := logprobs(t, m, a)
	if d := maxDiff(want, logprobs(t, m, nil)); d < 1e-3 {
		t.Fatalf("the adapter changes nothing (%g): the test would prove nothing", d)
	}
	g := merger{m: m, a: a}
	w := &engine.Weights[float32]{Embed: m.W.Embed, FinalNorm: m.W.FinalNorm, Layers: make([]engine.Layer[float32], len(m.W.Layers))}
	w.LMHead, _ = g.lmHead()
	for l := range w.Layers {
		L := m.W.Layers[l]
		L.Wq, _, _ = g.proj(l, engine.ProjQ)
		L.Wk, _, _ = g.proj(l, engine.ProjK)
		L.Wv, _, _ = g.proj(l, engine.ProjV)
		L.Wo, _, _ = g.proj(l, engine.ProjO)
		L.Wgate, _, _ = g.proj(l, engine.ProjGate)
		L.Wup, _, _ = g.proj(l, engine.ProjUp)
		L.Wdown, _, _ = g.proj(l, engine.ProjDown)
		w.Layers[l] = L
	}
	cfg := m.Cfg
	cfg.TieEmbeddings = false
	mm, err := engine.NewModel("merged", cfg, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(want, logprobs(t, mm, nil)); d > 1e-4 {
		t.Errorf("merged weights: logprobs differ by %g from base+adapter", d)
	}

	out := filepath.Join(t.TempDir(), "hf")
	files, err := Write(Options{Format: HF, Model: m, Base: base, Adapter: ckpt}, out)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		if !contains(files, f) {
			t.Errorf("hf export lacks %s (wrote %v)", f, files)
		}
	}
	hm, err := engine.Load(out, "exported")
	if err != nil {
		t.Fatal(err)
	}
	if hm.Cfg.TieEmbeddings {
		t.Error("an lm_head LoRA must untie the exported embeddings")
	}
	if d := maxDiff(want, logprobs(t, hm, nil)); d > 0.05 {
		t.Errorf("hf export (bf16): logprobs differ by %g from base+adapter", d)
	}
	if _, err := Write(Options{Format: PEFT, Adapter: ckpt}, filepath.Join(t.TempDir(), "p")); err == nil || !strings.Contains(err.Error(), "lm_head") {
		t.Errorf("peft export of an lm_head adapter: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(out)); len(ents) != 1 {
		t.Errorf("a refused export left files: %v", ents)
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// The PEFT export is the adapter's config and weights (never optimizer state), and loads
// back into the engine as the same adapter.
func TestPEFTExport(t *testing.T) {
	m, _ := tiny(t)
	a, ckpt := trained(t, m, engine.LoraConfig{Rank: 4, Alpha: 8, Seed: 3, TrainAttn: true, TrainMLP: true})
	out := filepath.Join(t.TempDir(), "peft")
	files, err := Write(Options{Format: PEFT, Adapter: ckpt}, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("wrote %v", files)
	}
	if _, err := os.Stat(filepath.Join(out, engine.OptimizerWeightsFile)); err == nil {
		t.Error("the optimizer state was exported")
	}
	b, err := m.LoadAdapter(out, false)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(logprobs(t, m, a), logprobs(t, m, b)); d != 0 {
		t.Errorf("the exported adapter differs: %g", d)
	}
}

// The GGUF model export: llama.cpp's names and metadata, q/k rows in llama.cpp's rotary
// order, each quant within its rounding of the merged weights.
func TestGGUFExport(t *testing.T) {
	m, base := tiny(t)
	a, ckpt := trained(t, m, engine.LoraConfig{Rank: 4, Alpha: 8, Seed: 3, TrainAttn: true, TrainMLP: true})
	g := merger{m: m, a: a}
	for _, q := range []string{"f16", "bf16", "q8_0"} {
		out := filepath.Join(t.TempDir(), q)
		files, err := Write(Options{Format: GGUF, Quant: q, Model: m, Base: base, Adapter: ckpt}, out)
		if err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Open(filepath.Join(out, files[0]))
		if err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]any{"general.architecture": "llama", "llama.block_count": uint32(4),
			"llama.attention.head_count_kv": uint32(2), "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.eos_token_id": uint32(379),
			"tokenizer.ggml.eot_token_id": uint32(381), "general.file_type": ggufFileType(Quants[q])} {
			if kv, ok := f.Lookup(k); !ok || kv.Value != want {
				t.Errorf("%s: %s = %v, want %v", q, k, kv.Value, want)
			}
		}
		if toks, err := f.Strings("tokenizer.ggml.tokens"); err != nil || len(toks) != 512 || toks[381] != "<|im_end|>" {
			t.Errorf("%s: tokens: %v (%d)", q, err, len(toks))
		}
		if _, ok := f.Tensor("output.weight"); ok {
			t.Errorf("%s: tied embeddings were written as output.weight", q)
		}
		wq, _, in := g.proj(1, engine.ProjQ)
		ti, ok := f.Tensor("blk.1.attn_q.weight")
		if !ok || ti.Type != Quants[q] {
			t.Fatalf("%s: blk.1.attn_q.weight: %+v", q, ti)
		}
		got, err := f.Float32(ti)
		if err != nil {
			t.Fatal(err)
		}
		perm := permuteRows(wq, m.Cfg.Heads, in)
		tol := map[string]float64{"f16": 1e-3, "bf16": 1e-2, "q8_0": 1e-2}[q]
		if d := maxDiff(perm, got); d > tol {
			t.Errorf("%s: attn_q differs from the permuted merged weights by %g", q, d)
		}
		if d := maxDiff(wq, got); d < 10*tol {
			t.Errorf("%s: attn_q is not permuted (differs from the unpermuted by only %g)", q, d)
		}
		f.Close()
		mf, err := os.ReadFile(filepath.Join(out, ModelfileName))
		if err != nil || !strings.HasPrefix(string(mf), "# Ollama") || !strings.Contains(string(mf), "FROM ./"+files[0]) {
			t.Errorf("%s: Modelfile: %v\n%s", q, err, mf)
		}
	}
}

// The GGUF LoRA adapter: the keys and tensor names llama.cpp's --lora reads, B's rows in
// rotary order for q and k, and the base beside it.
func TestGGUFLoRAExport(t *testing.T) {
	m, base := tiny(t)
	a, ckpt := trained(t, m, engine.LoraConfig{Rank: 4, Alpha: 8, Seed: 3, TrainAttn: true})
	out := filepath.Join(t.TempDir(), "lora")
	files, err := Write(Options{Format: GGUFLoRA, Quant: "q8_0", Model: m, Base: base, Adapter: ckpt}, out)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(filepath.Join(out, LoRAGGUFName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for k, want := range map[string]any{"general.type": "adapter", "adapter.type": "lora", "adapter.lora.alpha": float32(8),
		"general.architecture": "llama"} {
		if kv, ok := f.Lookup(k); !ok || kv.Value != want {
			t.Errorf("%s = %v, want %v", k, kv.Value, want)
		}
	}
	if len(f.Tensors) != 4*4*2 {
		t.Errorf("%d tensors, want 32 (4 layers, 4 projections, A and B)", len(f.Tensors))
	}
	ta, _ := f.Tensor("blk.2.attn_k.weight.lora_a")
	tb, _ := f.Tensor("blk.2.attn_k.weight.lora_b")
	if len(ta.Dims) != 2 || ta.Dims[0] != 256 || ta.Dims[1] != 4 || len(tb.Dims) != 2 || tb.Dims[0] != 4 || tb.Dims[1] != 128 {
		t.Fatalf("lora_a dims %v, lora_b dims %v (ggml order)", ta.Dims, tb.Dims)
	}
	bv, _ := f.Float32(tb)
	if d := maxDiff(bv, permuteRows(a.W.Layers[2][engine.ProjK].B, m.Cfg.KVHeads, 4)); d != 0 {
		t.Errorf("lora_b of k is not the permuted B (%g)", d)
	}
	mf, _ := os.ReadFile(filepath.Join(out, ModelfileName))
	if !strings.Contains(string(mf), "ADAPTER ./adapter.gguf") || !strings.Contains(string(mf), "FROM ./base-q8_0.gguf") {
		t.Errorf("Modelfile:\n%s", mf)
	}
	if !contains(files, "base-q8_0.gguf") {
		t.Errorf("files %v", files)
	}
}

// A GGUF export loads back into the engine (its GGUF loader undoes the rotary permutation
// and rebuilds the tokenizer from the metadata) and answers as base + adapter.
func TestGGUFExportLoadsBackIntoTheEngine(t *testing.T) {
	m, base := tiny(t)
	a, ckpt := trained(t, m, engine.LoraConfig{Rank: 4, Alpha: 8, Seed: 3, TrainAttn: true, TrainMLP: true, TrainUnembed: true})
	want := logprobs(t, m, a)
	for q, tol := range map[string]float64{"f16": 1e-3, "q8_0": 2e-2} {
		out := filepath.Join(t.TempDir(), q)
		files, err := Write(Options{Format: GGUF, Quant: q, Model: m, Base: base, Adapter: ckpt}, out)
		if err != nil {
			t.Fatal(err)
		}
		g, err := engine.Load(filepath.Join(out, files[0]), "back")
		if err != nil {
			t.Fatal(err)
		}
		if d := maxDiff(want, logprobs(t, g, nil)); d > tol {
			t.Errorf("%s: the GGUF export read back differs by %g from base + adapter", q, d)
		}
		text := "The quick brown fox jumps over the lazy dog. <|im_start|>user"
		w1, _ := m.Tok.Encode(text)
		w2, err := g.Tok.Encode(text)
		if err != nil || fmt.Sprint(w1) != fmt.Sprint(w2) {
			t.Errorf("%s: the GGUF's tokenizer encodes %v, the base's %v (%v)", q, w2, w1, err)
		}
	}
}

// A model whose CPU keeps its matrices in a narrow format holds no float32 copy (W is
// nil): a merged export reads the base weights from the model's file, so it equals the
// export of the same adapter on the float32 model.
func TestMergedExportOfANarrowCPUModel(t *testing.T) {
	m, base := tiny(t)
	a, ckpt := trained(t, m, engine.LoraConfig{Rank: 4, Alpha: 8, Seed: 5, TrainAttn: true, TrainMLP: true})
	want := logprobs(t, m, a)
	dev, _, err := engine.OpenDevice("cpu", engine.DeviceOptions{CPUWeightFormat: engine.WeightsQ8_0})
	if err != nil {
		t.Fatal(err)
	}
	narrow, err := engine.Load(base, "tiny", engine.OnDevice(dev))
	if err != nil {
		t.Fatal(err)
	}
	if narrow.W != nil {
		t.Fatal("a q8_0 CPU model keeps a float32 copy")
	}
	out := filepath.Join(t.TempDir(), "hf")
	if _, err := Write(Options{Format: HF, Model: narrow, Base: base, Adapter: ckpt}, out); err != nil {
		t.Fatal(err)
	}
	hm, err := engine.Load(out, "exported")
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(want, logprobs(t, hm, nil)); d > 0.05 {
		t.Errorf("hf export (bf16) of the q8_0 model: logprobs differ by %g from the float32 base+adapter", d)
	}
	_, err = Write(Options{Format: HF, Model: narrow, Adapter: ckpt}, filepath.Join(t.TempDir(), "x"))
	if err == nil || !strings.Contains(err.Error(), "no float32 copy") {
		t.Errorf("export without a base file: %v", err)
	}
}
