package sched

import (
	"context"
	"fmt"
	"time"

	"github.com/tuft-go/tuft/engine"
)

// This file is the scheduler's third kind of unit: an exclusive job, a device operation
// that is not a decode step or a training pack (an optimizer step, creating, loading,
// saving or removing an adapter). The loop owns the model's device, so every operation on
// it runs there, one at a time, and the loop gives the device's error after each unit to
// that unit's work only (endUnit): an error never crosses from one operation to another.

// job is an exclusive job in the scheduler.
type job struct {
	ctx     context.Context
	run     func() error
	done    func(error)
	arrived time.Time
	closed  bool
}

func (j *job) finish(err error) {
	if j.closed {
		return
	}
	j.closed = true
	j.done(err)
}

// SubmitJob queues run, a device operation, to run on the loop goroutine between decode
// steps and training packs, and returns at once; done receives run's error (or the
// device's error after it, or ctx's error if ctx ends while the job waits, or ErrClosed)
// exactly once, on the loop goroutine (on this one, before SubmitJob returns, when the
// scheduler is closed). Neither may block on other work of this scheduler: they hold the
// loop. A job waits for at most one decode step or training pack per job queued before
// it, plus one (docs/scheduling.md).
func (s *Scheduler) SubmitJob(ctx context.Context, run func() error, done func(error)) {
	j := &job{ctx: ctx, run: run, done: done, arrived: time.Now()}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		j.finish(ErrClosed)
		return
	}
	s.jobIn = append(s.jobIn, j)
	s.start()
	s.mu.Unlock()
}

// runJob runs the oldest queued job; its outcome is given at the unit's end (endUnit).
func (s *Scheduler) runJob() bool {
	j := s.jobs[0]
	s.jobs = s.jobs[1:]
	s.out.job = j
	s.stats.jobs.Add(1)
	if s.hooks.job != nil {
		s.hooks.job()
	}
	s.out.jobErr = j.run()
	return true
}

// dropEndedJobs fails the queued jobs whose context ended.
func (s *Scheduler) dropEndedJobs() {
	keep := s.jobs[:0]
	for _, j := range s.jobs {
		if err := j.ctx.Err(); err != nil {
			j.finish(fmt.Errorf("device operation ended after %s waiting for the model: %w", time.Since(j.arrived).Round(time.Millisecond), err))
			continue
		}
		keep = append(keep, j)
	}
	clear(s.jobs[len(keep):])
	s.jobs = keep
}

// unitOutcome is the work of the unit being run and the answers it settled: they are
// given after the loop's device check (endUnit), so a device error of the unit fails the
// unit's own work and nothing else.
type unitOutcome struct {
	touched map[*Sample]bool // requests with sequences in the decode step
	pack    []*fbCall        // calls in the training pack
	job     *job
	jobErr  error
	samples []*Sample // settled during the unit (r.err holds the outcome)
	calls   []*fbCall // settled during the unit (c.res, c.err)
}

// endUnit checks the device after a unit and answers the unit's settled work: with a
// device error, every request, call and job of the unit fails with it, including those
// that had completed (their results came from a failing device).
func (s *Scheduler) endUnit() {
	out := s.out
	s.out = nil
	if err := s.devErr(); err != nil {
		err = fmt.Errorf("device error: %w", err)
		for r := range out.touched {
			if r.settled {
				if r.err == nil {
					r.err = err
				}
			} else {
				s.failRequest(r, err)
			}
		}
		for _, c := range out.pack {
			if c.settled {
				if c.err == nil {
					c.res, c.err = engine.ForwardResult{}, err
				}
			} else {
				s.failCall(c, err)
			}
		}
		if out.job != nil && out.jobErr == nil {
			out.jobErr = err
		}
		s.prune()
	}
	for _, r := range out.samples {
		r.finish(r.err)
	}
	for _, c := range out.calls {
		c.finish(c.res, c.err)
	}
	if out.job != nil {
		out.job.finish(out.jobErr)
	}
}
