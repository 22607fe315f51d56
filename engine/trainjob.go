package engine

import (
	"context"
	"fmt"
	"runtime"
)

// TrainJob is one forward or forward_backward request run a few datums at a time, so
// that a scheduler can interleave the parts of many requests (of many adapters and
// tenants) and decode steps on one model, and bound how long any of them waits. Its
// gradients accumulate apart and reach the adapter only when every datum has run and
// Finish is called: a job that fails or is aborted changes nothing. ForwardBackwardBatch
// is the same computation run in one go. A job is used by one goroutine at a time, the
// one that runs the model's steps.
type TrainJob struct {
	m    *Model
	a    *Adapter
	it   *fbItem[float32]
	next int  // datums [0, next) have run
	over bool // finished or aborted: the scratch is freed
}

// NewTrainJob validates req and prepares it to run on adapter a (nil: the base model,
// forward only). Errors are *InputError for bad requests.
func (m *Model) NewTrainJob(a *Adapter, req ForwardRequest) (*TrainJob, error) {
	it := &fbItem[float32]{req: req}
	if a != nil {
		it.lw = loraOn(m.dev, &a.W)
		if req.Backward {
			it.grad = loraOn(m.dev, &a.Grad)
		}
	} else if req.Backward {
		return nil, Inputf("forward_backward needs a LoRA adapter: the base model is frozen")
	}
	if !it.start(m.Cfg, m.dev) {
		return nil, it.err
	}
	if err := m.dev.Err(); err != nil {
		it.scratch.free()
		return nil, fmt.Errorf("forward_backward on %s: %w", m.dev.Name(), err)
	}
	return &TrainJob{m: m, a: a, it: it}, nil
}

// Datums is the number of datums in the job's request.
func (j *TrainJob) Datums() int { return len(j.it.req.Data) }

// Next is the index of the first datum that has not run.
func (j *TrainJob) Next() int { return j.next }

// DatumTokens is the number of tokens (rows of a pass) of datum i.
func (j *TrainJob) DatumTokens(i int) int { return len(j.it.req.Data[i].Tokens) }

// Done reports whether every datum has run.
func (j *TrainJob) Done() bool { return j.next == len(j.it.req.Data) }

// TrainPart is the next N datums of a job, for one TrainStep.
type TrainPart struct {
	Job *TrainJob
	N   int
}

// TrainStep runs the parts' datums in one pass over the base weights (two when parts
// that need gradients and forward-only parts mix), each datum with its job's adapter,
// and accumulates their gradients in the jobs' scratch. The caller chooses how many
// datums to run, which bounds the step's time. On error every job of the step fails
// (Finish reports the error) and none of them changes its adapter.
func (m *Model) TrainStep(ctx context.Context, parts []TrainPart) error {
	if len(parts) == 0 {
		return Inputf("train step has no parts")
	}
	items := make([]*fbItem[float32], len(parts))
	var train, infer []datumRef
	for i, p := range parts {
		j := p.Job
		switch {
		case j == nil || j.m != m:
			return Inputf("train step: part %d is not a job of this model", i)
		case j.over:
			return Inputf("train step: part %d's job is finished or aborted", i)
		case p.N < 1 || j.next+p.N > j.Datums():
			return Inputf("train step: part %d asks for %d datums from %d of %d", i, p.N, j.next, j.Datums())
		}
		for _, q := range parts[:i] {
			if q.Job == j {
				return Inputf("train step: part %d's job appears twice", i)
			}
		}
		items[i] = j.it
		for k := j.next; k < j.next+p.N; k++ {
			if j.it.grad != nil {
				train = append(train, datumRef{i, k})
			} else {
				infer = append(infer, datumRef{i, k})
			}
		}
	}
	err := ctx.Err()
	for _, refs := range [][]datumRef{train, infer} {
		if err == nil && len(refs) > 0 {
			err = runPack(m.Cfg, m.dev, m.dw, m.rope, items, refs)
		}
	}
	runtime.KeepAlive(parts) // the adapters' device copies are in use until here
	if err != nil {
		for _, p := range parts {
			p.Job.Abort(err)
		}
		return err
	}
	for _, p := range parts {
		p.Job.next += p.N
	}
	return nil
}

// Finish ends a job whose datums have all run: its gradients are added to the
// adapter's and its result returned. A failed or aborted job returns its error.
func (j *TrainJob) Finish() (ForwardResult, error) {
	if j.over {
		if j.it.err == nil {
			return ForwardResult{}, fmt.Errorf("train job finished twice")
		}
		return ForwardResult{}, j.it.err
	}
	if !j.Done() {
		return ForwardResult{}, fmt.Errorf("train job finished after %d of %d datums", j.next, j.Datums())
	}
	d := j.m.dev
	j.it.finish(d)
	if err := d.Err(); err != nil && j.it.err == nil {
		j.it.err = fmt.Errorf("%s: %w", d.Name(), err)
	}
	j.over = true
	j.it.scratch.free()
	if j.it.err != nil {
		return ForwardResult{}, j.it.err
	}
	runtime.KeepAlive(j.a)
	return j.it.res, nil
}

// Abort ends a job without changing its adapter (err is what Finish then returns).
func (j *TrainJob) Abort(err error) {
	if j.over {
		return
	}
	if err == nil {
		err = fmt.Errorf("train job aborted")
	}
	j.it.err, j.it.res = err, ForwardResult{}
	j.over = true
	j.it.scratch.free()
}
