package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
)

func smallConfig(arch string, llama3 bool) Config {
	c := Config{Arch: arch, VocabSize: 64, Hidden: 16, Intermediate: 24, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 4,
		RopeTheta: 10000, RMSNormEps: 1e-5, MaxPositions: 64, BOSTokenID: -1, EOSTokenIDs: []int32{63}, AttnBias: arch == "qwen2"}
	if llama3 {
		c.RopeScaling = &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 16}
	}
	return c
}

func randWeights[T interface{ ~float32 | ~float64 }](c Config, rng *rand.Rand, tied bool) *Weights[T] {
	r := func(n int, s float64) []T {
		out := make([]T, n)
		for i := range out {
			out[i] = T(rng.NormFloat64() * s)
		}
		return out
	}
	ones := func(n int) []T {
		out := r(n, 0.1)
		for i := range out {
			out[i] += 1
		}
		return out
	}
	D, I, V, q, kv := c.Hidden, c.Intermediate, c.VocabSize, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	w := &Weights[T]{Embed: r(V*D, 0.5), FinalNorm: ones(D), Layers: make([]Layer[T], c.Layers)}
	w.LMHead = w.Embed
	if !tied {
		w.LMHead = r(V*D, 0.5)
	}
	for l := range w.Layers {
		w.Layers[l] = Layer[T]{AttnNorm: ones(D), Wq: r(q*D, 0.3), Wk: r(kv*D, 0.3), Wv: r(kv*D, 0.3), Wo: r(D*q, 0.3),
			MLPNorm: ones(D), Wgate: r(I*D, 0.3), Wup: r(I*D, 0.3), Wdown: r(D*I, 0.3)}
		if c.AttnBias {
			w.Layers[l].Bq, w.Layers[l].Bk, w.Layers[l].Bv = r(q, 0.1), r(kv, 0.1), r(kv, 0.1)
		}
	}
	return w
}

func toF64(lw *LoraWeights[float32]) *LoraWeights[float64] {
	cv := func(p *LoraPair[float32]) *LoraPair[float64] {
		if p == nil {
			return nil
		}
		q := &LoraPair[float64]{In: p.In, Out: p.Out, A: make([]float64, len(p.A)), B: make([]float64, len(p.B))}
		for i, v := range p.A {
			q.A[i] = float64(v)
		}
		for i, v := range p.B {
			q.B[i] = float64(v)
		}
		return q
	}
	out := &LoraWeights[float64]{Rank: lw.Rank, Scale: float64(lw.Scale), Layers: make([][NumLayerProj]*LoraPair[float64], len(lw.Layers))}
	for l := range lw.Layers {
		for p := Proj(0); p < NumLayerProj; p++ {
			out.Layers[l][p] = cv(lw.Layers[l][p])
		}
	}
	out.LMHead = cv(lw.LMHead)
	return out
}

// randomAdapter64 is an adapter on every target with non-zero A and B, so every
// gradient path carries signal.
func randomAdapter64(c Config, rng *rand.Rand) *LoraWeights[float64] {
	cfg := LoraConfig{Rank: 3, Alpha: 6, TrainAttn: true, TrainMLP: true, TrainUnembed: true}
	lw := zeroLike(c, cfg)
	for _, p := range lw.pairs() {
		for i := range p.A {
			p.A[i] = float32(rng.NormFloat64() * 0.3)
		}
		for i := range p.B {
			p.B[i] = float32(rng.NormFloat64() * 0.3)
		}
	}
	lw.Scale = 2
	return toF64(&lw)
}

func lossRequest(name string, c Config, rng *rand.Rand, k int) ForwardRequest {
	var data []Datum
	for _, n := range []int{7, 4} {
		toks := make([]int32, n)
		for i := range toks {
			toks[i] = int32(rng.IntN(c.VocabSize))
		}
		tt := make([]int64, n*k)
		for i := range tt {
			tt[i] = int64(rng.IntN(c.VocabSize))
		}
		shape := []int{n}
		if k > 1 {
			shape = []int{n, k}
		}
		f := func(lo, hi float64) []float32 {
			out := make([]float32, n*k)
			for i := range out {
				out[i] = float32(lo + (hi-lo)*rng.Float64())
			}
			return out
		}
		in := map[string]Tensor{"target_tokens": {DType: Int64, Shape: shape, I64: tt}}
		if name == "cross_entropy" {
			in["weights"] = Tensor{DType: Float32, Shape: shape, F32: f(0.2, 1.5)}
		} else {
			// Old logprobs near the model's (about −4.2 for a 64-token vocabulary) give
			// ratios on both sides of the clip thresholds.
			in["logprobs"] = Tensor{DType: Float32, Shape: shape, F32: f(-5.5, -3)}
			in["advantages"] = Tensor{DType: Float32, Shape: shape, F32: f(-1, 1)}
			in["weights"] = Tensor{DType: Float32, Shape: shape, F32: f(0.5, 1)}
		}
		data = append(data, Datum{Tokens: toks, LossInputs: in})
	}
	cfg := map[string]float64{}
	if name == "dro" {
		cfg["beta"] = 0.3
	}
	return ForwardRequest{Data: data, LossFn: name, LossFnConfig: cfg, Backward: true}
}

func TestGradientsMatchFiniteDifferences(t *testing.T) {
	cases := []struct {
		name, arch string
		llama3     bool
		tied       bool
		loss       string
		k          int
	}{
		{"ce llama tied", "llama", false, true, "cross_entropy", 1},
		{"ce topk qwen2 untied", "qwen2", false, false, "cross_entropy", 3},
		{"ce llama3 rope", "llama", true, true, "cross_entropy", 1},
		{"importance_sampling", "qwen2", false, true, "importance_sampling", 1},
		{"ppo", "llama", false, false, "ppo", 1},
		{"dro", "qwen2", true, false, "dro", 1},
	}
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			c := smallConfig(tc.arch, tc.llama3)
			w := randWeights[float64](c, rng, tc.tied)
			lw := randomAdapter64(c, rng)
			req := lossRequest(tc.loss, c, rng, tc.k)
			rope := newRope(c, c.MaxPositions)
			loss := func() float64 {
				res, err := forwardBackward(context.Background(), c, w, rope, lw, nil, req)
				if err != nil {
					t.Fatal(err)
				}
				return res.Metrics["loss:sum"]
			}
			grad := zeroLoraLike(lw)
			if _, err := forwardBackward(context.Background(), c, w, rope, lw, &grad, req); err != nil {
				t.Fatal(err)
			}
			ps, gs := lw.pairs(), grad.pairs()
			checked := 0
			for pi := range ps {
				for _, ab := range []struct {
					v, g []float64
				}{{ps[pi].A, gs[pi].A}, {ps[pi].B, gs[pi].B}} {
					for s := 0; s < 3; s++ {
						i := rng.IntN(len(ab.v))
						old := ab.v[i]
						const eps = 1e-6
						ab.v[i] = old + eps
						lp := loss()
						ab.v[i] = old - eps
						lm := loss()
						ab.v[i] = old
						fd := (lp - lm) / (2 * eps)
						if d := math.Abs(fd - ab.g[i]); d > 1e-5*math.Max(1, math.Abs(fd)) {
							t.Fatalf("pair %d index %d: analytic %.10g, finite difference %.10g", pi, i, ab.g[i], fd)
						}
						checked++
					}
				}
			}
			if checked < 80 {
				t.Fatalf("only %d gradients checked", checked)
			}
		})
	}
}

// TestCISPOGradientIsStopGradWeightedCE checks CISPO by its definition: the clamped ratio
// is a constant (stop-gradient), so its gradient equals cross-entropy's with weights
// clamp(r)·A·mask evaluated at the current parameters.
func TestCISPOGradientIsStopGradWeightedCE(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 1))
	c := smallConfig("llama", false)
	w := randWeights[float64](c, rng, true)
	lw := randomAdapter64(c, rng)
	rope := newRope(c, c.MaxPositions)
	req := lossRequest("cispo", c, rng, 1)
	g1 := zeroLoraLike(lw)
	res, err := forwardBackward(context.Background(), c, w, rope, lw, &g1, req)
	if err != nil {
		t.Fatal(err)
	}
	ce := ForwardRequest{LossFn: "cross_entropy", Backward: true}
	for i, d := range req.Data {
		lp := res.Outputs[i]["logprobs"].F32
		old, adv, mask := d.LossInputs["logprobs"].F32, d.LossInputs["advantages"].F32, d.LossInputs["weights"].F32
		wts := make([]float32, len(lp))
		for j := range lp {
			r := math.Exp(float64(lp[j]) - float64(old[j]))
			wts[j] = float32(math.Min(math.Max(r, 0), 4) * float64(adv[j]) * float64(mask[j]))
		}
		ce.Data = append(ce.Data, Datum{Tokens: d.Tokens, LossInputs: map[string]Tensor{"target_tokens": d.LossInputs["target_tokens"],
			"weights": {DType: Float32, Shape: d.LossInputs["weights"].Shape, F32: wts}}})
	}
	g2 := zeroLoraLike(lw)
	if _, err := forwardBackward(context.Background(), c, w, rope, lw, &g2, ce); err != nil {
		t.Fatal(err)
	}
	a, b := g1.pairs(), g2.pairs()
	for i := range a {
		for j := range a[i].A {
			// float32 weights and logprobs in the CE request bound the agreement.
			if d := math.Abs(a[i].A[j] - b[i].A[j]); d > 1e-5*math.Max(1, math.Abs(a[i].A[j])) {
				t.Fatalf("pair %d A[%d]: cispo %v, weighted CE %v", i, j, a[i].A[j], b[i].A[j])
			}
		}
	}
}

func tinyModel(t testing.TB, opts ...Option) *Model {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := WritePreset("tiny", dir); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir, "tiny", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func ceRequest(toks []int32) ForwardRequest {
	n := len(toks) - 1
	tt := make([]int64, n)
	w := make([]float32, n)
	for i := range tt {
		tt[i], w[i] = int64(toks[i+1]), 1
	}
	return ForwardRequest{LossFn: "cross_entropy", Backward: true, Data: []Datum{{Tokens: toks[:n],
		LossInputs: map[string]Tensor{"target_tokens": {DType: Int64, Shape: []int{n}, I64: tt}, "weights": {DType: Float32, Shape: []int{n}, F32: w}}}}}
}

func TestFreshAdapterEqualsBaseModel(t *testing.T) {
	m := tinyModel(t)
	a, err := m.NewAdapter(LoraConfig{Rank: 4, Seed: 1, TrainAttn: true, TrainMLP: true, TrainUnembed: true})
	if err != nil {
		t.Fatal(err)
	}
	req := ceRequest([]int32{5, 9, 17, 33, 65, 129, 200, 7})
	req.Backward = false
	withA, err := m.ForwardBackward(context.Background(), a, req)
	if err != nil {
		t.Fatal(err)
	}
	base, err := m.ForwardBackward(context.Background(), nil, req)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range base.Outputs[0]["logprobs"].F32 {
		if withA.Outputs[0]["logprobs"].F32[i] != v {
			t.Fatalf("B=0 adapter changes logprob %d: %v vs %v", i, withA.Outputs[0]["logprobs"].F32[i], v)
		}
	}
}

func TestTrainingLowersLossAndSaveLoadContinuesExactly(t *testing.T) {
	checkTrainSaveLoad(t, tinyModel(t))
}

// checkTrainSaveLoad trains a few steps on m, saves and reloads the adapter with its
// optimizer state and pending gradients, and checks both copies continue identically.
func checkTrainSaveLoad(t *testing.T, m *Model) {
	ctx := context.Background()
	a, _ := m.NewAdapter(LoraConfig{Rank: 8, Alpha: 16, Seed: 3, TrainAttn: true, TrainMLP: true, TrainUnembed: true})
	req := ceRequest([]int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21})
	p := AdamParams{LearningRate: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.01, GradClipNorm: 1}
	var losses []float64
	for i := 0; i < 3; i++ {
		r, err := m.ForwardBackward(ctx, a, req)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, r.Metrics["loss:sum"])
		if _, err := m.OptimStep(ctx, a, p); err != nil {
			t.Fatal(err)
		}
	}
	if !(losses[2] < losses[0]) {
		t.Fatalf("loss did not fall: %v", losses)
	}
	// Pending gradients are never saved (a checkpoint may be published): the loaded
	// adapter starts without them, and both continue exactly from there.
	if _, err := m.ForwardBackward(ctx, a, req); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := m.SaveAdapter(a, dir, true); err != nil {
		t.Fatal(err)
	}
	b, err := m.LoadAdapter(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range b.Grad.pairs() {
		for _, v := range append(append([]float32(nil), g.A...), g.B...) {
			if v != 0 {
				t.Fatal("a loaded adapter holds gradients")
			}
		}
	}
	for _, g := range a.Grad.pairs() {
		clear(g.A)
		clear(g.B)
	}
	for i := 0; i < 2; i++ {
		for _, x := range []*Adapter{a, b} {
			if _, err := m.ForwardBackward(ctx, x, req); err != nil {
				t.Fatal(err)
			}
			if _, err := m.OptimStep(ctx, x, p); err != nil {
				t.Fatal(err)
			}
		}
		ra, _ := m.ForwardBackward(ctx, a, req)
		rb, _ := m.ForwardBackward(ctx, b, req)
		if ra.Metrics["loss:sum"] != rb.Metrics["loss:sum"] {
			t.Fatalf("step %d after reload: %v vs %v", i, ra.Metrics["loss:sum"], rb.Metrics["loss:sum"])
		}
	}
	for _, x := range []*Adapter{a, b} {
		if err := m.AdapterToHost(x); err != nil {
			t.Fatal(err)
		}
	}
	pa, pb := a.W.pairs(), b.W.pairs()
	for i := range pa {
		for j := range pa[i].A {
			if pa[i].A[j] != pb[i].A[j] {
				t.Fatalf("weights diverged at pair %d", i)
			}
		}
	}
}

func TestAdamWMatchesTorchFormula(t *testing.T) {
	m := tinyModel(t)
	a, _ := m.NewAdapter(LoraConfig{Rank: 2, Seed: 5, TrainAttn: true})
	p := a.W.pairs()[0]
	g := a.Grad.pairs()[0]
	w0 := float64(p.A[0])
	lr, b1, b2, eps, wd := 0.01, 0.9, 0.99, 1e-8, 0.1
	grads := []float64{0.5, -0.25}
	mm, vv, w := 0.0, 0.0, w0
	for step, gr := range grads {
		g.A[0] = float32(gr)
		if _, err := m.OptimStep(context.Background(), a, AdamParams{LearningRate: lr, Beta1: b1, Beta2: b2, Eps: eps, WeightDecay: wd}); err != nil {
			t.Fatal(err)
		}
		tt := float64(step + 1)
		w *= 1 - lr*wd
		mm = b1*mm + (1-b1)*gr
		vv = b2*vv + (1-b2)*gr*gr
		w -= lr / (1 - math.Pow(b1, tt)) * mm / (math.Sqrt(vv)/math.Sqrt(1-math.Pow(b2, tt)) + eps)
		if d := math.Abs(float64(p.A[0]) - w); d > 1e-6 {
			t.Fatalf("step %d: %v, want %v", step+1, p.A[0], w)
		}
		if g.A[0] != 0 {
			t.Fatal("gradients not zeroed")
		}
	}
}

// fullLogp is the log-softmax of every row of one sequence, from a training-style pass
// (no cache) on the model's device.
func fullLogp(m *Model, lw *LoraWeights[float32], toks []int32) []float32 {
	p := newPass(m.Cfg, m.dev, m.dw, m.rope, []segment[float32]{{n: len(toks), lw: loraOn(m.dev, lw)}}, nil)
	defer p.release()
	act := p.forward(toks, false, nil)
	V := m.Cfg.VocabSize
	m.dev.LogSoftmax(act.logits, len(toks), V)
	out := make([]float32, len(toks)*V)
	m.dev.Download(out, act.logits)
	return out
}

// stepLogp runs toks through DecodeStep on cache and returns every row's full
// log-softmax (top-k over the whole vocabulary, put back in token order).
func stepLogp(t *testing.T, m *Model, lw *LoraWeights[float32], cache *KVCache[float32], toks []int32) []float32 {
	t.Helper()
	V := m.Cfg.VocabSize
	outs, err := m.DecodeStep(context.Background(), []StepSeq{{Adapter: lw, Cache: cache, Tokens: toks, TopK: V}})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(toks)*V)
	for i, row := range outs[0].TopK {
		for _, tl := range row {
			out[i*V+int(tl.Token)] = tl.Logprob
		}
	}
	return out
}

// Decoding from a KV cache equals a full forward pass: one token at a time, in prefill
// chunks, and in a forked cache that continues differently from its parent.
func TestKVCacheDecodingEqualsFullForward(t *testing.T) {
	checkKVDecode(t, nil, 1e-4)
}

// checkKVDecode runs the KV-cache checks on small random models on a device (nil: the
// CPU); tol bounds the difference of each log-probability.
func checkKVDecode(t *testing.T, dev Device, tol float64) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, arch := range []string{"llama", "qwen2"} {
		c := smallConfig(arch, arch == "llama")
		w := randWeights[float32](c, rng, arch == "qwen2")
		var opts []Option
		if dev != nil {
			opts = append(opts, OnDevice(dev))
		}
		m, err := NewModel("t", c, w, nil, opts...)
		if err != nil {
			t.Fatal(err)
		}
		lw := zeroLike(c, LoraConfig{Rank: 2, TrainAttn: true, TrainMLP: true, TrainUnembed: true})
		for _, p := range lw.pairs() {
			for i := range p.A {
				p.A[i] = float32(rng.NormFloat64() * 0.2)
			}
			for i := range p.B {
				p.B[i] = float32(rng.NormFloat64() * 0.2)
			}
		}
		lw.Scale = 1
		// More positions than one block, so tables span blocks.
		toks := []int32{1, 5, 9, 3, 30, 12, 7, 44, 2, 17, 60, 33, 8, 21, 40, 11, 6, 50, 29, 3, 14}
		alt := append(append([]int32(nil), toks[:9]...), 62, 61, 4)
		V := c.VocabSize
		pool, err := m.NewKVPool(16)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		check := func(what string, got, full []float32, from int) {
			t.Helper()
			for i := 0; i < len(got)/V; i++ {
				for v := 0; v < V; v++ {
					if d := math.Abs(float64(got[i*V+v] - full[(from+i)*V+v])); d > tol {
						t.Fatalf("%s %s position %d token %d: cached %v vs full %v", arch, what, from+i, v, got[i*V+v], full[(from+i)*V+v])
					}
				}
			}
		}
		full, fullAlt := fullLogp(m, &lw, toks), fullLogp(m, &lw, alt)
		one := pool.NewCache()
		for i, tok := range toks {
			check("one at a time", stepLogp(t, m, &lw, one, []int32{tok}), full, i)
		}
		chunked := pool.NewCache()
		for _, r := range [][2]int{{0, 4}, {4, 9}} {
			check("chunked", stepLogp(t, m, &lw, chunked, toks[r[0]:r[1]]), full, r[0])
		}
		fork := chunked.Fork()
		check("parent after fork", stepLogp(t, m, &lw, chunked, toks[9:]), full, 9)
		check("fork", stepLogp(t, m, &lw, fork, alt[9:]), fullAlt, 9)
		for _, kc := range []*KVCache[float32]{one, chunked, fork} {
			kc.Release()
		}
		if pool.FreeBlocks() != pool.Blocks() {
			t.Fatalf("%d of %d blocks free after releasing every cache", pool.FreeBlocks(), pool.Blocks())
		}
	}
}

func TestSampledLogprobsEqualTeacherForced(t *testing.T) {
	checkSampledLogprobs(t, tinyModel(t), 1e-4)
}

// checkSampledLogprobs checks on m that sampled and prompt logprobs equal teacher-forced
// ones (within tol), that a seed fixes the output and that top_k=1 is greedy.
func checkSampledLogprobs(t *testing.T, m *Model, tol float64) {
	seed := int64(11)
	prompt := []int32{40, 41, 42, 43}
	res, err := m.Sample(context.Background(), nil, SampleRequest{Prompt: prompt, NumSamples: 3,
		Params: SampleParams{MaxTokens: 6, Temperature: 1, TopK: -1, TopP: 1, Seed: &seed}, PromptLogprobs: true})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := m.Sample(context.Background(), nil, SampleRequest{Prompt: prompt, NumSamples: 3,
		Params: SampleParams{MaxTokens: 6, Temperature: 1, TopK: -1, TopP: 1, Seed: &seed}})
	for i, s := range res.Sequences {
		if len(s.Tokens) != len(again.Sequences[i].Tokens) {
			t.Fatal("same seed, different output")
		}
		full := append(append([]int32(nil), prompt...), s.Tokens...)
		req := ceRequest(full)
		req.Backward = false
		fr, err := m.ForwardBackward(context.Background(), nil, req)
		if err != nil {
			t.Fatal(err)
		}
		lp := fr.Outputs[0]["logprobs"].F32
		for j, v := range s.Logprobs {
			want := lp[len(prompt)-1+j]
			if math.Abs(float64(v-want)) > tol {
				t.Fatalf("sequence %d token %d: sampled logprob %v, teacher-forced %v", i, j, v, want)
			}
		}
		for j := 1; j < len(prompt); j++ {
			if math.Abs(float64(res.PromptLogprobs[j]-lp[j-1])) > tol {
				t.Fatalf("prompt logprob %d: %v vs %v", j, res.PromptLogprobs[j], lp[j-1])
			}
		}
	}
	if !math.IsNaN(float64(res.PromptLogprobs[0])) {
		t.Fatal("prompt logprob 0 must be NaN")
	}
	// Greedy equals argmax of the forward pass, and top_k=1 equals greedy.
	g, _ := m.Sample(context.Background(), nil, SampleRequest{Prompt: prompt, NumSamples: 1, Params: SampleParams{MaxTokens: 4, Temperature: 0, TopK: -1, TopP: 1}})
	k1, _ := m.Sample(context.Background(), nil, SampleRequest{Prompt: prompt, NumSamples: 1, Params: SampleParams{MaxTokens: 4, Temperature: 0.7, TopK: 1, TopP: 1, Seed: &seed}})
	for j := range g.Sequences[0].Tokens {
		if g.Sequences[0].Tokens[j] != k1.Sequences[0].Tokens[j] {
			t.Fatalf("top_k=1 differs from greedy at %d", j)
		}
	}
}

func TestBadInputIsRejectedByName(t *testing.T) {
	m := tinyModel(t)
	a, _ := m.NewAdapter(LoraConfig{Rank: 2, TrainAttn: true})
	req := ceRequest([]int32{1, 2, 3, 4})
	cases := []struct {
		name string
		mut  func(r *ForwardRequest)
		want string
	}{
		{"unknown loss", func(r *ForwardRequest) { r.LossFn = "hinge" }, `unknown loss_fn "hinge"`},
		{"unknown config key", func(r *ForwardRequest) { r.LossFnConfig = map[string]float64{"beta": 1} }, `"beta"`},
		{"token out of vocab", func(r *ForwardRequest) { r.Data[0].Tokens = []int32{1, 2, 9999} }, "9999"},
		{"target out of vocab", func(r *ForwardRequest) { r.Data[0].LossInputs["target_tokens"].I64[0] = -1 }, "target_tokens"},
		{"missing input", func(r *ForwardRequest) { r.LossFn = "ppo" }, `"logprobs"`},
		{"unknown input", func(r *ForwardRequest) {
			r.Data[0].LossInputs["mask"] = Tensor{DType: Float32, Shape: []int{3}, F32: []float32{1, 1, 1}}
		}, `"mask"`},
		{"shape", func(r *ForwardRequest) {
			r.Data[0].LossInputs["weights"] = Tensor{DType: Float32, Shape: []int{2}, F32: []float32{1, 1}}
		}, "weights shape"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := ceRequest([]int32{1, 2, 3, 4})
			tc.mut(&r)
			before := append([]float32(nil), a.Grad.pairs()[0].A...)
			_, err := m.ForwardBackward(context.Background(), a, r)
			if err == nil || !contains(err.Error(), tc.want) {
				t.Fatalf("error %v does not mention %q", err, tc.want)
			}
			for i, v := range a.Grad.pairs()[0].A {
				if v != before[i] {
					t.Fatal("a rejected request changed the gradients")
				}
			}
		})
	}
	_ = req
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0))
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}
