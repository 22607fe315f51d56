package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// headCounter is the CPU device, counting which loss head a pass took: the fused one
// (LossHead) or the full logits (LogSoftmax over every row).
type headCounter[T kern.Float] struct {
	*device.CPU[T]
	fused, full int
}

func (h *headCounter[T]) LossHead(x *device.Head[T]) { h.fused++; h.CPU.LossHead(x) }
func (h *headCounter[T]) LogSoftmax(x device.Tensor[T], rows, cols int) {
	h.full++
	h.CPU.LogSoftmax(x, rows, cols)
}

// fbOn is forwardBackward on a given device.
func fbOn[T kern.Float](d device.Device[T], c Config, w *Weights[T], lw, grad *LoraWeights[T], req ForwardRequest) (ForwardResult, error) {
	dw, err := uploadWeights(d, c, w, nil)
	if err != nil {
		return ForwardResult{}, err
	}
	it := &fbItem[T]{lw: loraOn(d, lw), grad: loraOn(d, grad), req: req}
	runBatch(context.Background(), c, d, dw, newRope(c, c.MaxPositions), []*fbItem[T]{it})
	return it.res, it.err
}

// Every loss, with top-K targets too, takes the fused head (never a log-softmax over full
// logits), with and without a LoRA pair on the unembedding; and a pair with B = 0, which
// changes no logit, changes no log-probability, loss or other gradient, and gives the
// pair's A no gradient (dL/dZ = dL/dlogits·B = 0) but B one.
func TestFusedLossHeadUnembeddingPair(t *testing.T) {
	t.Parallel()
	cases := []struct {
		loss string
		k    int
		tied bool
	}{{"cross_entropy", 1, true}, {"cross_entropy", 3, false}, {"importance_sampling", 1, false},
		{"ppo", 1, true}, {"cispo", 1, false}, {"dro", 1, true}}
	for ci, tc := range cases {
		rng := rand.New(rand.NewPCG(uint64(ci), 11))
		c := smallConfig("qwen2", false)
		w := randWeights[float64](c, rng, tc.tied)
		withLM := randomAdapter64(c, rng)
		clear(withLM.LMHead.B)
		fusedLW := *withLM
		fusedLW.LMHead = nil
		req := lossRequest(tc.loss, c, rng, tc.k)
		run := func(lw *LoraWeights[float64]) (ForwardResult, LoraWeights[float64], *headCounter[float64]) {
			d := &headCounter[float64]{CPU: device.NewCPU[float64]()}
			g := zeroLoraLike(lw)
			res, err := fbOn[float64](d, c, w, lw, &g, req)
			if err != nil {
				t.Fatalf("%s: %v", tc.loss, err)
			}
			return res, g, d
		}
		fres, fgrad, fd := run(&fusedLW)
		wres, wgrad, wd := run(withLM)
		if fd.fused != 1 || fd.full != 0 || wd.fused != 1 || wd.full != 0 {
			t.Fatalf("%s: heads taken: without the unembedding pair %d fused/%d full, with it %d fused/%d full", tc.loss, fd.fused, fd.full, wd.fused, wd.full)
		}
		near := func(what string, a, b float64) {
			if math.Abs(a-b) > 1e-9*math.Max(1, math.Abs(b)) {
				t.Fatalf("%s (k=%d) %s: without the pair %.12g, with it %.12g", tc.loss, tc.k, what, a, b)
			}
		}
		near("loss", fres.Metrics["loss:sum"], wres.Metrics["loss:sum"])
		for i := range req.Data {
			a, b := fres.Outputs[i]["logprobs"].F32, wres.Outputs[i]["logprobs"].F32
			for j := range b {
				near("logprob", float64(a[j]), float64(b[j]))
			}
		}
		fp, wp := fgrad.pairs(), wgrad.pairs()
		if len(fp) != len(wp)-1 {
			t.Fatalf("%d pairs with the fused head, %d with the full logits", len(fp), len(wp))
		}
		nonzero := 0
		for i := range fp {
			for j := range fp[i].A {
				near("dA", fp[i].A[j], wp[i].A[j])
			}
			for j := range fp[i].B {
				near("dB", fp[i].B[j], wp[i].B[j])
				if fp[i].B[j] != 0 {
					nonzero++
				}
			}
		}
		if nonzero == 0 {
			t.Fatalf("%s: every gradient is zero", tc.loss)
		}
		lmA, lmB := 0.0, 0.0
		for _, v := range wgrad.LMHead.A {
			lmA = math.Max(lmA, math.Abs(v))
		}
		for _, v := range wgrad.LMHead.B {
			lmB = math.Max(lmB, math.Abs(v))
		}
		if lmA > 1e-12 || lmB == 0 {
			t.Fatalf("%s: the unembedding pair's gradients: max |dA| %g (want 0), max |dB| %g (want > 0)", tc.loss, lmA, lmB)
		}
	}
}

// A forward-only pass (no gradients) takes the fused head too and matches the full
// logits' log-probabilities.
func TestFusedLossHeadForwardOnly(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 9))
	c := smallConfig("llama", false)
	w := randWeights[float64](c, rng, true)
	req := lossRequest("cross_entropy", c, rng, 1)
	req.Backward = false
	d := &headCounter[float64]{CPU: device.NewCPU[float64]()}
	res, err := fbOn[float64](d, c, w, nil, nil, req)
	if err != nil {
		t.Fatal(err)
	}
	if d.fused != 1 || d.full != 0 {
		t.Fatalf("heads taken: %d fused, %d full", d.fused, d.full)
	}
	// The reference: the full logits of the same rows, log-softmax in float64.
	cpu := device.NewCPU[float64]()
	dw, _ := uploadWeights[float64](cpu, c, w, nil)
	for i, dt := range req.Data {
		p := newPass(c, device.Device[float64](cpu), dw, newRope(c, c.MaxPositions), []segment[float64]{{n: len(dt.Tokens)}}, nil)
		act := p.forward(dt.Tokens, false, nil)
		V := c.VocabSize
		cpu.LogSoftmax(act.logits, len(dt.Tokens), V)
		for j, tgt := range dt.LossInputs["target_tokens"].I64 {
			want := act.logits.Host()[j*V+int(tgt)]
			if got := float64(res.Outputs[i]["logprobs"].F32[j]); math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
				t.Fatalf("datum %d row %d: fused %.9g, full %.9g", i, j, got, want)
			}
		}
	}
}

// The finite-difference check of the gradients through the fused head: an adapter without
// the unembedding pair, every loss that is a function of the parameters (CISPO's clamped
// ratio is a stop-gradient: TestCISPOGradientIsStopGradWeightedCE checks it).
func TestFusedLossHeadGradientsMatchFiniteDifferences(t *testing.T) {
	t.Parallel()
	for ci, loss := range []string{"cross_entropy", "importance_sampling", "ppo", "dro"} {
		rng := rand.New(rand.NewPCG(uint64(ci), 13))
		c := smallConfig("llama", false)
		w := randWeights[float64](c, rng, ci%2 == 0)
		lw := randomAdapter64(c, rng)
		lw.LMHead = nil
		k := 1
		if loss == "cross_entropy" {
			k = 3 // top-K targets
		}
		req := lossRequest(loss, c, rng, k)
		d := device.NewCPU[float64]()
		lossAt := func() float64 {
			res, err := fbOn[float64](d, c, w, lw, nil, req)
			if err != nil {
				t.Fatal(err)
			}
			return res.Metrics["loss:sum"]
		}
		grad := zeroLoraLike(lw)
		if _, err := fbOn[float64](d, c, w, lw, &grad, req); err != nil {
			t.Fatal(err)
		}
		ps, gs := lw.pairs(), grad.pairs()
		for s := 0; s < 24; s++ {
			pi := rng.IntN(len(ps))
			v, g := ps[pi].B, gs[pi].B
			if s%2 == 0 {
				v, g = ps[pi].A, gs[pi].A
			}
			i := rng.IntN(len(v))
			old := v[i]
			const eps = 1e-6
			v[i] = old + eps
			lp := lossAt()
			v[i] = old - eps
			lm := lossAt()
			v[i] = old
			fd := (lp - lm) / (2 * eps)
			if e := math.Abs(fd - g[i]); e > 1e-5*math.Max(1, math.Abs(fd)) {
				t.Fatalf("%s pair %d index %d: analytic %.10g, finite difference %.10g", loss, pi, i, g[i], fd)
			}
		}
	}
}
