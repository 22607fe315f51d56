package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
)

// Jobs run a datum at a time, interleaved with other adapters' jobs in steps of mixed
// parts (gradient and forward-only), give what ForwardBackward gives in one call; an
// aborted job and a failed step leave their adapters untouched.
func TestTrainJobsInPartsEqualOneCall(t *testing.T) {
	m := tinyModel(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	var jobs []*TrainJob
	var alone []ForwardResult
	var stepped, ref []*Adapter
	for i, loss := range []string{"cross_entropy", "ppo", "importance_sampling"} {
		req := lossRequest(loss, m.Cfg, rng, 1)
		req.Data = append(req.Data, lossRequest(loss, m.Cfg, rng, 1).Data...) // four datums
		if i == 2 {
			req.Backward = false
		}
		a, _ := m.NewAdapter(LoraConfig{Rank: 4, TrainAttn: true, TrainMLP: true, Seed: int64(i)})
		b, _ := m.NewAdapter(LoraConfig{Rank: 4, TrainAttn: true, TrainMLP: true, Seed: int64(i)})
		randomizeAdapter(a, rand.New(rand.NewPCG(uint64(i), 3)))
		randomizeAdapter(b, rand.New(rand.NewPCG(uint64(i), 3)))
		stepped, ref = append(stepped, a), append(ref, b)
		j, err := m.NewTrainJob(a, req)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
		r, err := m.ForwardBackward(ctx, b, req)
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, r)
	}
	// Steps: {job0: 1, job1: 2, job2: 1}, {job0: 3, job2: 3}, {job1: 2}.
	plan := [][]TrainPart{
		{{jobs[0], 1}, {jobs[1], 2}, {jobs[2], 1}},
		{{jobs[0], 3}, {jobs[2], 3}},
		{{jobs[1], 2}},
	}
	for _, parts := range plan {
		if err := m.TrainStep(ctx, parts); err != nil {
			t.Fatal(err)
		}
	}
	for i, j := range jobs {
		if !j.Done() {
			t.Fatalf("job %d not done after its datums ran", i)
		}
		got, err := j.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if !closeRel(got.Metrics["loss:sum"], alone[i].Metrics["loss:sum"], 1e-5) {
			t.Fatalf("job %d loss %v, in one call %v", i, got.Metrics["loss:sum"], alone[i].Metrics["loss:sum"])
		}
		for d := range alone[i].Outputs {
			g, w := got.Outputs[d]["logprobs"].F32, alone[i].Outputs[d]["logprobs"].F32
			for x := range w {
				if !closeRel(float64(g[x]), float64(w[x]), 1e-5) {
					t.Fatalf("job %d datum %d logprob %d: %v vs %v", i, d, x, g[x], w[x])
				}
			}
		}
		gp, rp := stepped[i].Grad.pairs(), ref[i].Grad.pairs()
		for k := range rp {
			for x := range rp[k].B {
				if !closeRel(float64(gp[k].B[x]), float64(rp[k].B[x]), 1e-4) {
					t.Fatalf("job %d gradient %d[%d]: %v vs %v", i, k, x, gp[k].B[x], rp[k].B[x])
				}
			}
		}
	}
	if _, err := jobs[0].Finish(); err == nil {
		t.Fatal("a job finished twice")
	}

	// An aborted job, half run, leaves no gradient; so does a step that fails.
	zeroGrads := func(a *Adapter) bool {
		for _, p := range a.Grad.pairs() {
			for _, v := range p.B {
				if v != 0 {
					return false
				}
			}
		}
		return true
	}
	a, _ := m.NewAdapter(LoraConfig{Rank: 2, TrainAttn: true})
	j, _ := m.NewTrainJob(a, lossRequest("cross_entropy", m.Cfg, rng, 1))
	if err := m.TrainStep(ctx, []TrainPart{{j, 1}}); err != nil {
		t.Fatal(err)
	}
	j.Abort(errors.New("cancelled"))
	if _, err := j.Finish(); err == nil || err.Error() != "cancelled" || !zeroGrads(a) {
		t.Fatalf("aborted job: %v, gradients zero %v", err, zeroGrads(a))
	}
	j2, _ := m.NewTrainJob(a, lossRequest("cross_entropy", m.Cfg, rng, 1))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := m.TrainStep(cctx, []TrainPart{{j2, 2}}); err == nil {
		t.Fatal("a step with a cancelled context ran")
	}
	if _, err := j2.Finish(); err == nil || !zeroGrads(a) {
		t.Fatal("a failed step's job finished or left gradients")
	}
	// Bad steps are refused by name.
	j3, _ := m.NewTrainJob(a, lossRequest("cross_entropy", m.Cfg, rng, 1))
	for _, parts := range [][]TrainPart{{{j3, 0}}, {{j3, 3}}, {{j3, 1}, {j3, 1}}, {{nil, 1}}} {
		var ie *InputError
		if err := m.TrainStep(ctx, parts); !errors.As(err, &ie) {
			t.Fatalf("step %v: %v, want an input error", parts, err)
		}
	}
	if _, err := m.NewTrainJob(nil, lossRequest("cross_entropy", m.Cfg, rng, 1)); err == nil {
		t.Fatal("a backward job on the base model")
	}
}
