package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/tuft-go/tuft/engine"
)

// The multi-adapter training figure of `tuft-bench engine` (issue 25's "sixteen adapters
// of different tenants in one step cost ≤ 1.3× one adapter's step"): one batched step of
// M adapters over T/M tokens each (ForwardBackwardBatch, the LoRA products grouped per
// projection) and an optimizer step per adapter, against the single-adapter step of T
// tokens measured just before on the same model. The M sequences of T/M tokens cost less
// attention than one of T (attention is quadratic in a sequence's length), so the figure
// also times one adapter over the same M sequences: that ratio is the cost of the
// adapters alone.

// benchMulti is the multi-adapter training figure.
type benchMulti struct {
	Adapters int       `json:"adapters"`
	Tokens   int       `json:"tokens"` // in all, split evenly over the adapters
	StepS    []float64 `json:"step_s"`
	MedianS  float64   `json:"median_s"`
	// FwdBwdS is the median of the batched forward+backward alone (no optimizer steps).
	FwdBwdS float64 `json:"fwd_bwd_median_s"`
	// Ratio is MedianS over the single-adapter step's median; FwdBwdRatio the same for
	// forward+backward alone.
	Ratio       float64 `json:"ratio_over_one_adapter"`
	FwdBwdRatio float64 `json:"fwd_bwd_ratio_over_one_adapter"`
	// SameShapeS is the median step of one adapter over the same M sequences (one
	// request of M datums); SameShapeRatio is MedianS over it.
	SameShapeS     float64 `json:"same_shape_median_s"`
	SameShapeRatio float64 `json:"ratio_over_one_adapter_same_sequences"`
}

// benchMultiTrain measures o.adapters adapters' batched step; single is the one-adapter
// figure (its median step and median forward+backward).
func benchMultiTrain(ctx context.Context, m *engine.Model, o benchOptions, single benchTrain, logf func(string, ...any)) (*benchMulti, error) {
	n := o.adapters
	if n > o.tokens {
		return nil, fmt.Errorf("--adapters %d: more than --tokens %d", n, o.tokens)
	}
	items := make([]engine.BatchItem, n)
	adapters := make([]*engine.Adapter, n)
	for i := range items {
		a, err := m.NewAdapter(engine.LoraConfig{Rank: o.rank, Alpha: float64(o.rank), Seed: o.seed + int64(i) + 1, TrainAttn: true, TrainMLP: true})
		if err != nil {
			return nil, err
		}
		defer func() { _ = m.ReleaseAdapter(a) }()
		adapters[i] = a
		// Tokens split as evenly as they go: T/M each, the first T mod M one more.
		k := o.tokens / n
		if i < o.tokens%n {
			k++
		}
		toks := benchTokens(k+1, m.Cfg.VocabSize, 13+i)
		targets := make([]int64, k)
		for j := range targets {
			targets[j] = int64(toks[j+1])
		}
		items[i] = engine.BatchItem{Adapter: a, Request: engine.ForwardRequest{LossFn: "cross_entropy", Backward: true, Data: []engine.Datum{{
			Tokens:     toks[:k],
			LossInputs: map[string]engine.Tensor{"target_tokens": {DType: engine.Int64, Shape: []int{k}, I64: targets}},
		}}}}
	}
	adam := engine.AdamParams{LearningRate: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
	r := &benchMulti{Adapters: n, Tokens: o.tokens}
	// One adapter over the same sequences: one request with every item's datum.
	same := engine.ForwardRequest{LossFn: "cross_entropy", Backward: true}
	for _, it := range items {
		same.Data = append(same.Data, it.Request.Data...)
	}
	var sameS []float64
	for step := 0; step <= o.steps; step++ {
		t := time.Now()
		if _, err := m.ForwardBackward(ctx, adapters[0], same); err != nil {
			return nil, err
		}
		if _, err := m.OptimStep(ctx, adapters[0], adam); err != nil {
			return nil, err
		}
		if dt := time.Since(t).Seconds(); step > 0 {
			sameS = append(sameS, dt)
			logf("1 adapter over %d sequences: train step %d/%d %.2fs", n, step, o.steps, dt)
		}
	}
	r.SameShapeS = median(sameS)
	var fb []float64
	for step := 0; step <= o.steps; step++ {
		t := time.Now()
		_, errs := m.ForwardBackwardBatch(ctx, items)
		for _, err := range errs {
			if err != nil {
				return nil, err
			}
		}
		tfb := time.Since(t).Seconds()
		for _, a := range adapters {
			if _, err := m.OptimStep(ctx, a, adam); err != nil {
				return nil, err
			}
		}
		dt := time.Since(t).Seconds()
		if step == 0 {
			logf("%d-adapter train warm-up step %.2fs", n, dt)
			continue
		}
		r.StepS, fb = append(r.StepS, dt), append(fb, tfb)
		logf("%d-adapter train step %d/%d %.2fs (forward+backward %.2fs)", n, step, o.steps, dt, tfb)
	}
	r.MedianS, r.FwdBwdS = median(r.StepS), median(fb)
	if single.MedianS > 0 {
		r.Ratio = r.MedianS / single.MedianS
	}
	if single.FwdBwdS > 0 {
		r.FwdBwdRatio = r.FwdBwdS / single.FwdBwdS
	}
	if r.SameShapeS > 0 {
		r.SameShapeRatio = r.MedianS / r.SameShapeS
	}
	return r, nil
}

// printMulti prints the multi-adapter figure under the table.
func printMulti(w io.Writer, r *benchReport) {
	mu := r.Go.Multi
	if mu == nil {
		return
	}
	fmt.Fprintf(w, "multi-adapter training: %d adapters × %d tokens in one step %.3fs vs one adapter × %d tokens %.3fs: %.2fx (forward+backward alone %.2fx; goal ≤ 1.3x)\n",
		mu.Adapters, mu.Tokens/mu.Adapters, mu.MedianS, mu.Tokens, r.Go.Train.MedianS, mu.Ratio, mu.FwdBwdRatio)
	fmt.Fprintf(w, "  vs one adapter over the same %d sequences %.3fs: %.2fx (the adapters' own cost; attention is the same)\n",
		mu.Adapters, mu.SameShapeS, mu.SameShapeRatio)
}
