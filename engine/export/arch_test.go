package export

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/gguf"
)

// smallModel builds a model of the given architecture in memory (random weights), with the
// tiny preset's tokenizer files in its directory.
func smallModel(t *testing.T, c engine.Config) (*engine.Model, string) {
	t.Helper()
	_, tinyDir := tiny(t)
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(tinyDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 1))
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.1)
		}
		return v
	}
	D, I, V, q, kv := c.Hidden, c.Intermediate, c.VocabSize, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	w := &engine.Weights[float32]{Embed: rnd(V * D), FinalNorm: rnd(D)}
	w.LMHead = w.Embed
	for range c.Layers {
		L := engine.Layer[float32]{AttnNorm: rnd(D), Wq: rnd(q * D), Wk: rnd(kv * D), Wv: rnd(kv * D), Wo: rnd(D * q),
			MLPNorm: rnd(D), Wgate: rnd(I * D), Wup: rnd(I * D), Wdown: rnd(D * I)}
		if c.AttnBias {
			L.Bq, L.Bk, L.Bv = rnd(q), rnd(kv), rnd(kv)
		}
		w.Layers = append(w.Layers, L)
	}
	m, err := engine.NewModel("small", c, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Dir = dir
	return m, dir
}

// Qwen2 keeps Hugging Face's rotary layout in llama.cpp (NeoX style): no row permutation,
// biases written as F32; Llama-3 rope scaling becomes rope_freqs.weight.
func TestGGUFQwen2AndLlama3Rope(t *testing.T) {
	base := engine.Config{VocabSize: 512, Hidden: 64, Intermediate: 128, Layers: 1, Heads: 4, KVHeads: 2, HeadDim: 16,
		RopeTheta: 500000, RMSNormEps: 1e-6, TieEmbeddings: true, MaxPositions: 256, BOSTokenID: -1, EOSTokenIDs: []int32{381}}
	qc := base
	qc.Arch, qc.AttnBias = "qwen2", true
	m, dir := smallModel(t, qc)
	w, err := modelWriter(merger{m: m}, dir, "q", gguf.F16)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(dir, "q.gguf"), w); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(filepath.Join(dir, "q.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if a, _ := f.String("general.architecture"); a != "qwen2" {
		t.Errorf("architecture %q", a)
	}
	ti, _ := f.Tensor("blk.0.attn_q.weight")
	got, _ := f.Float32(ti)
	if d := maxDiff(got, m.W.Layers[0].Wq); d > 1e-3 {
		t.Errorf("qwen2 attn_q differs from the HF rows by %g (it must not be permuted)", d)
	}
	bi, ok := f.Tensor("blk.0.attn_k.bias")
	if !ok || bi.Type != gguf.F32 {
		t.Fatalf("attn_k.bias: %+v", bi)
	}
	if got, _ := f.Float32(bi); maxDiff(got, m.W.Layers[0].Bk) != 0 {
		t.Error("attn_k.bias changed")
	}

	lc := base
	lc.Arch = "llama"
	lc.RopeScaling = &engine.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 64}
	m, dir = smallModel(t, lc)
	w, err = modelWriter(merger{m: m}, dir, "l", gguf.Q8_0)
	if err != nil {
		t.Fatal(err)
	}
	var rf *gguf.TensorInfo
	for _, ti := range w.Tensors() {
		if ti.Name == "rope_freqs.weight" {
			rf = &ti
		}
	}
	if rf == nil || rf.Dims[0] != 8 || rf.Type != gguf.F32 {
		t.Fatalf("rope_freqs.weight: %+v", rf)
	}
	fr := ropeFreqs(lc)
	if fr[0] != 1 || fr[len(fr)-1] != 8 {
		t.Errorf("rope factors %v: the highest frequency keeps 1, the lowest takes the factor 8", fr)
	}
}
