package engine

import (
	"context"
	"fmt"
	"math"
	"runtime"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// ForwardBackward runs forward (and, with req.Backward, backward) over the datums,
// accumulating gradients into a. a nil adapter is the base model (forward only). Inputs
// are validated before any gradient is touched.
func (m *Model) ForwardBackward(ctx context.Context, a *Adapter, req ForwardRequest) (ForwardResult, error) {
	res, errs := m.ForwardBackwardBatch(ctx, []BatchItem{{Adapter: a, Request: req}})
	return res[0], errs[0]
}

// BatchItem is one adapter's request in a multi-LoRA batch.
type BatchItem struct {
	Adapter *Adapter // nil: the base model (forward only)
	Request ForwardRequest
}

// ForwardBackwardBatch runs the requests of several adapters (or one adapter's several
// requests) together: their datums are packed so that each projection reads the shared
// base weights once for all of them, while LoRA terms, attention, losses and gradients
// stay per datum and per adapter. The results equal separate ForwardBackward calls. An
// invalid request fails alone (its error is in errs, nothing of it is applied); a
// cancelled context or a device error fails them all and applies no gradient.
func (m *Model) ForwardBackwardBatch(ctx context.Context, items []BatchItem) ([]ForwardResult, []error) {
	fb := make([]*fbItem[float32], len(items))
	for i, it := range items {
		fb[i] = &fbItem[float32]{req: it.Request}
		if a := it.Adapter; a != nil {
			fb[i].lw = loraOn(m.dev, &a.W)
			if it.Request.Backward {
				fb[i].grad = loraOn(m.dev, &a.Grad)
			}
		} else if it.Request.Backward {
			fb[i].err = Inputf("forward_backward needs a LoRA adapter: the base model is frozen")
		}
	}
	runBatch(ctx, m.Cfg, m.dev, m.dw, m.rope, fb)
	res, errs := make([]ForwardResult, len(fb)), make([]error, len(fb))
	for i, it := range fb {
		res[i], errs[i] = it.res, it.err
	}
	runtime.KeepAlive(items) // the adapters' device copies are in use until here
	return res, errs
}

// forwardBackward runs one request on the CPU in any precision (tests use float64).
func forwardBackward[T kern.Float](ctx context.Context, c Config, w *Weights[T], rope *device.Rope, lw, grad *LoraWeights[T], req ForwardRequest) (ForwardResult, error) {
	d := device.NewCPU[T]()
	dw, err := uploadWeights(d, c, w, nil)
	if err != nil {
		return ForwardResult{}, err
	}
	it := &fbItem[T]{lw: loraOn(d, lw), grad: loraOn(d, grad), req: req}
	runBatch(ctx, c, d, dw, rope, []*fbItem[T]{it})
	return it.res, it.err
}

// fbItem is one request of a batch and what becomes of it.
type fbItem[T kern.Float] struct {
	lw, grad *devLora[T]
	req      ForwardRequest
	spec     lossSpec
	cfg      map[string]float64
	ks       []int
	scratch  *devLora[T] // gradients land here first: a failed call adds nothing
	total    float64
	res      ForwardResult
	err      error
}

// maxPackRows bounds the rows packed into one pass: the log-probabilities alone take
// rows × vocabulary floats.
const maxPackRows = 1024

type datumRef struct{ item, datum int }

func runBatch[T kern.Float](ctx context.Context, c Config, d device.Device[T], w *devWeights[T], rope *device.Rope, items []*fbItem[T]) {
	var train, infer []datumRef
	defer func() {
		for _, it := range items {
			it.scratch.free()
		}
	}()
	for i, it := range items {
		if !it.start(c, d) {
			continue
		}
		for j := range it.req.Data {
			if it.grad != nil {
				train = append(train, datumRef{i, j})
			} else {
				infer = append(infer, datumRef{i, j})
			}
		}
	}
	// Datums that need gradients and those that do not go in separate passes, so no
	// backward runs over rows that cannot use it.
	for _, refs := range [][]datumRef{train, infer} {
		for len(refs) > 0 {
			if err := ctx.Err(); err != nil {
				failAll(items, err)
				return
			}
			rows, k := 0, 0
			for k < len(refs) && (k == 0 || rows+len(items[refs[k].item].req.Data[refs[k].datum].Tokens) <= maxPackRows) {
				rows += len(items[refs[k].item].req.Data[refs[k].datum].Tokens)
				k++
			}
			if err := runPack(c, d, w, rope, items, refs[:k]); err != nil {
				failAll(items, err)
				return
			}
			refs = refs[k:]
		}
	}
	if err := ctx.Err(); err != nil {
		failAll(items, err)
		return
	}
	for _, it := range items {
		it.finish(d)
	}
	if err := d.Err(); err != nil {
		failAll(items, fmt.Errorf("%s: %w", d.Name(), err))
	}
}

// start validates the item and sets up its result and scratch gradients; false when it
// failed (it.err says why).
func (it *fbItem[T]) start(c Config, d device.Device[T]) bool {
	if it.err != nil {
		return false
	}
	if it.err = it.validate(c); it.err != nil {
		return false
	}
	it.res = ForwardResult{Outputs: make([]map[string]Tensor, len(it.req.Data)), Metrics: map[string]float64{}}
	if it.grad != nil {
		it.scratch = zeroOn(d, it.grad)
	}
	return true
}

// finish adds the item's scratch gradients to its adapter's and sets its metrics, unless
// it failed.
func (it *fbItem[T]) finish(d device.Device[T]) {
	if it.err != nil {
		return
	}
	// Inputs within their ranges can still overflow together (an importance ratio
	// e^(new-old) past float64): such a result is refused and adds no gradient.
	if math.IsNaN(it.total) || math.IsInf(it.total, 0) || (it.scratch != nil && !finiteSq(d.SumSquares(it.scratch.tensors()))) {
		it.err, it.res = Inputf("the loss of %s or its gradients are not finite (loss %g): the inputs overflowed them (e.g. logprobs far "+
			"below the model's, or weights grown huge); nothing was accumulated", it.req.LossFn, it.total), ForwardResult{}
		return
	}
	if it.scratch != nil {
		for i, p := range it.grad.list {
			s := it.scratch.list[i]
			d.Add(p.a, p.a, s.a)
			d.Add(p.b, p.b, s.b)
		}
	}
	it.res.Metrics["loss:sum"] = it.total
}

// finiteSq reports whether a sum of squares is finite: it is exactly when every term is
// (float32 values squared stay far inside float64's range).
func finiteSq(sq float64) bool { return !math.IsNaN(sq) && !math.IsInf(sq, 0) }

func failAll[T kern.Float](items []*fbItem[T], err error) {
	for _, it := range items {
		if it.err == nil {
			it.err, it.res = err, ForwardResult{}
		}
	}
}

func (it *fbItem[T]) validate(c Config) error {
	spec, cfg, err := resolveLoss(it.req.LossFn, it.req.LossFnConfig)
	if err != nil {
		return err
	}
	if _, err := resolveTextConfig(it.req.LossFn, spec, it.req.LossFnConfig, it.req.LossFnTextConfig); err != nil {
		return err
	}
	if len(it.req.Data) == 0 {
		return Inputf("data is empty")
	}
	it.spec, it.cfg = spec, cfg
	it.ks = make([]int, len(it.req.Data))
	for i, d := range it.req.Data {
		if it.ks[i], err = validateDatum(i, d, spec, c); err != nil {
			return err
		}
	}
	return nil
}

// runPack runs forward (and backward where the datums' items train) over one pack. The
// losses are computed on the host from the target log-probabilities (n·k values per
// datum); only the vocabulary-wide parts (log-softmax, the gradient with respect to the
// logits) run on the device.
func runPack[T kern.Float](c Config, d device.Device[T], w *devWeights[T], rope *device.Rope, items []*fbItem[T], refs []datumRef) error {
	segs := make([]segment[T], len(refs))
	var tokens []int32
	backward := false
	for i, r := range refs {
		it := items[r.item]
		dt := it.req.Data[r.datum]
		segs[i] = segment[T]{start: len(tokens), n: len(dt.Tokens), lw: it.lw, grad: it.scratch}
		backward = backward || it.scratch != nil
		tokens = append(tokens, dt.Tokens...)
	}
	p := newPass(c, d, w, rope, segs, nil)
	// Everything this pass returns is copied out of it (logprobs, gradients into the
	// items' scratch), so its host buffers can be recycled.
	p.recycle = d.HostMemory()
	defer p.release()
	act := p.forward(tokens, backward, nil)
	V := c.VocabSize
	d.LogSoftmax(act.logits, len(tokens), V)
	// The log-probabilities of every datum's targets, in one gather.
	var idx []int64
	for i, r := range refs {
		it := items[r.item]
		tt := it.req.Data[r.datum].LossInputs["target_tokens"].I64
		k := it.ks[r.datum]
		for j, t := range tt {
			idx = append(idx, int64(segs[i].start+j/k)*int64(V)+t)
		}
	}
	lpAll := make([]T, len(idx))
	d.Gather(lpAll, act.logits, idx)
	var xg device.XentGrad
	off := 0
	for i, r := range refs {
		it := items[r.item]
		dt := it.req.Data[r.datum]
		sg := segs[i]
		n, k := sg.n, it.ks[r.datum]
		tt := dt.LossInputs["target_tokens"].I64
		lp := make([]float64, n*k)
		out := make([]float32, n*k)
		for j := range lp {
			lp[j] = float64(lpAll[off+j])
			out[j] = float32(lp[j])
		}
		off += n * k
		loss, dlp := datumLoss(it.req.LossFn, it.cfg, lp, dt.LossInputs)
		it.total += loss
		shape := []int{n}
		if k > 1 {
			shape = []int{n, k}
		}
		it.res.Outputs[r.datum] = map[string]Tensor{"logprobs": {DType: Float32, Shape: shape, F32: out}}
		it.res.Tokens += n
		if it.scratch == nil {
			continue
		}
		// dL/dlogits = Σ_k dL/dlp_k · (onehot(target_k) − softmax), for rows with a
		// non-zero dL/dlp.
		for row := 0; row < n; row++ {
			var sum float64
			nonzero := false
			for kk := 0; kk < k; kk++ {
				sum += dlp[row*k+kk]
				nonzero = nonzero || dlp[row*k+kk] != 0
			}
			if !nonzero {
				continue
			}
			xg.Rows = append(xg.Rows, int32(sg.start+row))
			xg.Sums = append(xg.Sums, sum)
			for kk := 0; kk < k; kk++ {
				xg.Idx = append(xg.Idx, int64(sg.start+row)*int64(V)+tt[row*k+kk])
				xg.Vals = append(xg.Vals, dlp[row*k+kk])
			}
		}
	}
	if backward {
		// On the host the gradient overwrites the log-probabilities, each row read before
		// it is written; rows XentBack does not list must then be zeroed here.
		var dl device.Tensor[T]
		if h := act.logits.Host(); h != nil {
			dl = act.logits
			listed := make([]bool, len(tokens))
			for _, r := range xg.Rows {
				listed[r] = true
			}
			for r, ok := range listed {
				if !ok {
					clear(h[r*V : (r+1)*V])
				}
			}
		} else {
			dl = p.alloc(len(tokens) * V)
		}
		d.XentBack(dl, act.logits, V, &xg)
		p.backward(act, dl)
	}
	if err := d.Err(); err != nil {
		return fmt.Errorf("%s: %w", d.Name(), err)
	}
	return nil
}
