package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// blockConfig is a small model whose rows are whole 32-weight blocks, so every matrix
// takes the block formats (a row of another length falls back to bf16).
func blockConfig(arch string) Config {
	return Config{Arch: arch, VocabSize: 96, Hidden: 64, Intermediate: 96, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
		RopeTheta: 10000, RMSNormEps: 1e-5, MaxPositions: 64, BOSTokenID: -1, EOSTokenIDs: []int32{95}, AttnBias: arch == "qwen2"}
}

// q4kMoreFormat is the format q4_k gives a matrix with rows of cols that llama.cpp's
// Q4_K_M raises: Q6_K, or Q8_0 where rows are not whole super-blocks.
func q4kMoreFormat(cols int) kern.WeightFormat {
	if cols%kern.QKBlock != 0 {
		return kern.Q8_0
	}
	return kern.Q6_K
}

// TestQ4KMoreBits pins llama.cpp's use_more_bits on SmolLM2's 30 layers (the layers
// whose attn_v and ffn_down its Q4_K_M file holds in Q6_K or Q8_0: the first three, the
// last four, and every third from layer 5) and on the tiny preset's two.
func TestQ4KMoreBits(t *testing.T) {
	var got []int
	for i := 0; i < 30; i++ {
		if q4kMoreBits(i, 30) {
			got = append(got, i)
		}
	}
	if want := []int{0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("30 layers: more bits in %v, want %v", got, want)
	}
	if q4kMoreBits(0, 2) || !q4kMoreBits(1, 2) {
		t.Error("2 layers: want more bits in layer 1 only")
	}
}

// superBlockConfig is blockConfig with rows of 256 and 512 weights, whole Q4_K
// super-blocks (q4_k stores other rows as q5_0).
func superBlockConfig(arch string) Config {
	c := blockConfig(arch)
	c.Hidden, c.Intermediate, c.HeadDim = 256, 512, 64
	return c
}

// widenedWeights is what a model on a CPU with a narrow weight format computes with: its
// weights with every matrix widened back to float32.
func widenedWeights(t *testing.T, m *Model, w *Weights[float32], f kern.WeightFormat) *Weights[float32] {
	t.Helper()
	more := map[*float32]bool{}
	for i, L := range w.Layers {
		if q4kMoreBits(i, len(w.Layers)) {
			more[&L.Wv[0]], more[&L.Wdown[0]] = true, true
		}
	}
	widen := func(x device.Tensor[float32], orig []float32) []float32 {
		fz := x.Frozen()
		if fz == nil {
			t.Fatalf("%s: a matrix was not stored as a frozen matrix", f)
		}
		want := f
		if f == kern.Q4_K && len(orig) > 0 && (&orig[0] == &w.Embed[0] || &orig[0] == &w.LMHead[0] || more[&orig[0]]) {
			want = q4kMoreFormat(fz.Cols) // q4_k's embedding, LM head and Q4_K_M's more-bits matrices (placeMore)
		}
		if fz.Format != want {
			t.Fatalf("stored as %s, want %s", fz.Format, want)
		}
		out := make([]float32, len(orig))
		for r := 0; r < fz.Rows; r++ {
			fz.Row(out[r*fz.Cols:], r)
		}
		return out
	}
	if m.W != nil {
		t.Fatalf("%s: the model keeps a float32 copy besides its %s matrices", f, f)
	}

	out := &Weights[float32]{Embed: widen(m.dw.Embed, w.Embed), FinalNorm: w.FinalNorm, Layers: make([]Layer[float32], len(w.Layers))}
	out.LMHead = out.Embed
	if &w.LMHead[0] != &w.Embed[0] {
		out.LMHead = widen(m.dw.LMHead, w.LMHead)
	}
	for i := range w.Layers {
		L, dL := &w.Layers[i], &m.dw.Layers[i]
		out.Layers[i] = Layer[float32]{AttnNorm: L.AttnNorm, MLPNorm: L.MLPNorm, Bq: L.Bq, Bk: L.Bk, Bv: L.Bv,
			Wq: widen(dL.Wq, L.Wq), Wk: widen(dL.Wk, L.Wk), Wv: widen(dL.Wv, L.Wv), Wo: widen(dL.Wo, L.Wo),
			Wgate: widen(dL.Wgate, L.Wgate), Wup: widen(dL.Wup, L.Wup), Wdown: widen(dL.Wdown, L.Wdown)}
	}
	return out
}

// A model on a CPU storing its base weights as bf16, q8_0 or q4_1 computes what a float32
// model with those weights widened computes, to float32 rounding: prompt log-probs (the
// GEMM path), decoding one token at a time (the fused dot kernels), and LoRA training on
// the quantised base (QLoRA: the backward pass through the widened base; adapter
// gradients within 1e-4 relative, loss within 1e-5, log-probs within 1e-4). When sampling,
// bf16 rounds the activations of its forward products to bf16 too (kern/frozenbf16.go),
// which moves log-probs by about bf16's precision (2⁻⁸ relative): their bound is wider
// (tolBF16), and so is a prompt's where q8_0 and q4_1 products of several rows quantise
// the activations to 8 bits (tolInt8Acts; kern.Q8IntActivations, kern/frozenq8.go), and
// a decode step's in q8_0, q5_0 and q4_k where one row is quantised as well
// (kern.Q8IntDecode, kern/frozenq8dot.go).
// Training keeps float32 activations in every format, so its loss and gradients meet the
// float32 bounds (a bf16-rounded forward product misses them by 100×: loss 2.2e-3,
// gradients 0.094 relative on these models). How
// far each format moves the model from its float32 weights is the real-model suite's
// business (docs/models.md).
func TestCPUWeightFormatsComputeWithTheWidenedBase(t *testing.T) {
	ctx := context.Background()
	for _, arch := range []string{"llama", "qwen2"} {
		for _, f := range []kern.WeightFormat{kern.BF16, kern.Q8_0, kern.Q4_1, kern.Q4_K, kern.Q5_0} {
			t.Run(fmt.Sprintf("%s/%s", arch, f), func(t *testing.T) {
				c := blockConfig(arch)
				if f == kern.Q4_K {
					c = superBlockConfig(arch)
				}
				rng := rand.New(rand.NewPCG(21, uint64(f)))
				w := randWeights[float32](c, rng, arch == "qwen2")
				q, err := NewModel("q", c, w, nil, OnDevice(device.NewCPUWeights[float32](f)))
				if err != nil {
					t.Fatal(err)
				}
				ref, err := NewModel("ref", c, widenedWeights(t, q, w, f), nil, OnDevice(device.NewCPUWeights[float32](kern.F32)))
				if err != nil {
					t.Fatal(err)
				}
				toks := []int32{1, 5, 9, 3, 30, 12, 7, 44, 2, 17, 60, 33, 8, 21, 40, 11, 6, 50, 29, 3, 14}
				V := c.VocabSize
				lw := zeroLike(c, LoraConfig{Rank: 2, TrainAttn: true, TrainMLP: true, TrainUnembed: true})
				for _, p := range lw.pairs() {
					for i := range p.A {
						p.A[i] = float32(rng.NormFloat64() * 0.1)
					}
					for i := range p.B {
						p.B[i] = float32(rng.NormFloat64() * 0.1)
					}
				}
				lw.Scale = 1
				// Training multiplies float32 activations in every format (bf16 too), so
				// its bounds are float32's; only sampling rounds bf16's activations.
				tolLogp, tolLoss, tolGrad := 1e-4, 1e-5, 1e-4
				tolDecode := tolLogp
				switch {
				case f == kern.BF16:
					tolLogp, tolDecode = tolBF16.logp, tolBF16.logp
				case kern.Q8IntActivations(): // prompts; training keeps float32 activations
					tolLogp = tolInt8Acts.logp
					if kern.Q8IntDecode(f) { // and decode steps in some formats
						tolDecode = tolInt8Acts.logp
					}
				}
				if f == kern.Q4_K {
					// Rows 4–8× longer and logits of ±40 nats: float32 rounding of the
					// sums in another order reaches 1.3e-4.
					tolLogp, tolDecode = max(tolLogp, 5e-4), max(tolDecode, 5e-4)
				}
				near := func(what string, got, want []float32, tol float64) {
					t.Helper()
					for i := range want {
						if d := math.Abs(float64(got[i] - want[i])); d > tol {
							t.Fatalf("%s: element %d = %v, want %v", what, i, got[i], want[i])
						}
					}
				}
				full := fullLogp(ref, &lw, toks)
				near("prompt", fullLogp(q, &lw, toks), full, tolLogp)
				pool, err := q.NewKVPool(16)
				if err != nil {
					t.Fatal(err)
				}
				defer pool.Close()
				kc := pool.NewCache()
				defer kc.Release()
				for i, tok := range toks[:6] {
					near(fmt.Sprintf("decode position %d", i), stepLogp(t, q, &lw, kc, []int32{tok}), full[i*V:(i+1)*V], tolDecode)
				}

				// Training: the same adapter on both models, the same gradients.
				req := ceRequest(toks)
				var grads [2][]float32
				var loss [2]float64
				for i, m := range []*Model{q, ref} {
					a, err := m.NewAdapter(LoraConfig{Rank: 4, Seed: 5, TrainAttn: true, TrainMLP: true, TrainUnembed: true})
					if err != nil {
						t.Fatal(err)
					}
					randomizeAdapter(a, rand.New(rand.NewPCG(1, 1)))
					r, err := m.ForwardBackward(ctx, a, req)
					if err != nil {
						t.Fatal(err)
					}
					loss[i] = r.Metrics["loss:sum"]
					for _, p := range a.Grad.pairs() {
						grads[i] = append(append(grads[i], p.A...), p.B...)
					}
				}
				if !closeRel(loss[0], loss[1], tolLoss) {
					t.Fatalf("loss %v on the %s base, %v on its widened float32 copy", loss[0], f, loss[1])
				}
				var norm float64
				for _, g := range grads[1] {
					norm = math.Max(norm, math.Abs(float64(g)))
				}
				if norm == 0 {
					t.Fatal("no gradient")
				}
				for i := range grads[1] {
					if d := math.Abs(float64(grads[0][i] - grads[1][i])); d > tolGrad*norm {
						t.Fatalf("gradient %d: %v on the %s base, %v on its widened copy", i, grads[0][i], f, grads[1][i])
					}
				}
			})
		}
	}
}

// tolBF16 bounds a bf16 model's sampling log-probs' distance (absolute) from its widened
// float32 copy's, about three times what the rounded activations moved them by on these
// random models, whose logits span tens of nats (0.64 at most). That the bf16 products
// compute exactly with the rounded activations is kern's TestFrozenProducts; what the
// rounding costs a real model, the real-model suite's (docs/models.md).
var tolBF16 = struct{ logp float64 }{2}

// tolInt8Acts is tolBF16 for a prompt where q8_0 and q4_1 products of several rows
// quantise the activations to 8-bit blocks (kern.Q8IntActivations): about twice what the
// quantisation moved prompt log-probs by on these models (2.57 at most). Training keeps
// float32 activations and its 1e-4 bounds, and so does decoding one row in the formats
// kern.Q8IntDecode does not name.
var tolInt8Acts = struct{ logp float64 }{5}

// The CPU device's weight format is what engine.cpu_weight_format names, and f32 keeps
// the loaded matrices themselves (a kern.Frozen aliasing them, no copy).
func TestOpenDeviceCPUWeightFormat(t *testing.T) {
	for _, name := range []string{"f32", "bf16", "q8_0", "q4_1", "q4_k"} {
		f, err := ParseWeightFormat(name)
		if err != nil {
			t.Fatal(err)
		}
		d, _, err := OpenDevice("cpu", DeviceOptions{CPUWeightFormat: f})
		if err != nil {
			t.Fatal(err)
		}
		cpu, ok := d.(*device.CPU[float32])
		if !ok || cpu.WeightFormat() != f {
			t.Fatalf("%s: device %T", name, d)
		}
		src := make([]float32, 4*32)
		x := cpu.WeightMatrix(src, 4, 32)
		// (q4_k stores rows that are not whole 256-blocks in another format.)
		if x.Frozen() == nil || (f == WeightsF32) != (x.Frozen().Format == kern.F32) ||
			(f == WeightsF32 && &x.Frozen().F32()[0] != &src[0]) {
			t.Fatalf("%s: matrix stored as %+v", name, x.Frozen())
		}
	}
	if _, err := ParseWeightFormat("q6_k"); err == nil {
		t.Fatal("q6_k accepted")
	}
}
