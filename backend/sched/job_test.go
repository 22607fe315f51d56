package sched

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/device"
)

// faultDevice is the CPU device with an injectable sticky error: the next Err() after
// fail returns it (as a GPU reports a kernel's failure at the next synchronisation).
type faultDevice struct {
	engine.Device
	pending atomic.Pointer[error]
	checks  atomic.Int64
}

func (d *faultDevice) fail(err error) { d.pending.Store(&err) }

func (d *faultDevice) Err() error {
	d.checks.Add(1)
	if p := d.pending.Swap(nil); p != nil {
		return *p
	}
	return d.Device.Err()
}

// faultLocal hosts the tiny preset (without EOS) on a faultDevice.
func faultLocal(t *testing.T) (*testHost, *faultDevice) {
	t.Helper()
	dir := t.TempDir()
	if err := engine.WritePreset("tiny", dir); err != nil {
		t.Fatal(err)
	}
	d := &faultDevice{Device: device.NewCPU[float32]()}
	m, err := engine.Load(dir, "tiny", engine.OnDevice(d))
	if err != nil {
		t.Fatal(err)
	}
	m.Cfg.EOSTokenIDs = nil
	return newTestHost(t, m, testSched(Config{})), d
}

var adam = engine.StepParams{Adam: engine.AdamParams{LearningRate: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}}

// A device fault in one unit (a decode step whose device reports the failure only at
// the next synchronisation) fails that step's request; the optimizer step queued behind
// it, whose own check would have consumed the sticky error when it ran on its caller's
// goroutine, succeeds, and so does the next sample.
func TestDeviceErrorFailsOnlyItsUnit(t *testing.T) {
	l, d := faultLocal(t)
	ctx := context.Background()
	if err := l.CreateAdapter(ctx, "tiny", "a", engine.LoraConfig{Rank: 2, TrainAttn: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ForwardBackward(ctx, "tiny", "a", ce(prompt(9, 1))); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("injected device fault")
	var once sync.Once
	optim := make(chan error, 1)
	l.s.hooks.step = func([]planned) {
		once.Do(func() {
			d.fail(boom) // after DecodeStep's own check: only the loop's check sees it
			go func() {
				_, err := l.OptimStep(ctx, "tiny", "a", adam)
				optim <- err
			}()
			waitQueued(l.s, 1) // the optimizer step is queued behind this step
		})
	}
	_, err := l.Sample(WithTenant(ctx, "alice"), "tiny", "", seeded(prompt(6, 1), 1, 4, 1, 1))
	if !errors.Is(err, boom) {
		t.Fatalf("the sample whose step faulted: %v, want the device fault", err)
	}
	if err := <-optim; err != nil {
		t.Fatalf("the optimizer step after the faulted step: %v", err)
	}
	req := seeded(prompt(6, 2), 1, 4, 1, 2)
	got, err := l.Sample(WithTenant(ctx, "bob"), "tiny", "", req)
	if err != nil {
		t.Fatalf("the next sample: %v", err)
	}
	sameAsAlone(t, "after the fault", l.m, nil, req, got)
}

// goid is the calling goroutine's id (from its stack header), to tell goroutines apart.
func goid() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	f := bytes.Fields(b)
	return string(f[1])
}

// An optimizer step issued while decode steps run is executed by the loop goroutine,
// between two decode steps.
func TestJobRunsOnTheLoopBetweenSteps(t *testing.T) {
	l, _ := schedLocal(t, Config{})
	ctx := context.Background()
	if err := l.CreateAdapter(ctx, "tiny", "a", engine.LoraConfig{Rank: 2, TrainAttn: true}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var loopG, jobG string
	steps, jobAt := 0, -1
	issued := make(chan struct{})
	optim := make(chan error, 1)
	l.s.hooks.step = func([]planned) {
		mu.Lock()
		defer mu.Unlock()
		loopG = goid()
		steps++
		if steps == 2 {
			go func() {
				close(issued)
				_, err := l.OptimStep(ctx, "tiny", "a", adam)
				optim <- err
			}()
			<-issued
			waitQueued(l.s, 1)
		}
	}
	l.s.hooks.job = func() {
		mu.Lock()
		defer mu.Unlock()
		jobG, jobAt = goid(), steps
	}
	if _, err := l.Sample(ctx, "tiny", "", seeded(prompt(6, 1), 1, 12, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := <-optim; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if jobG == "" || jobG != loopG {
		t.Fatalf("the optimizer step ran on goroutine %q, the decode steps on %q", jobG, loopG)
	}
	if jobAt != 2 || steps <= jobAt {
		t.Fatalf("the job ran after step %d of %d, want between steps 2 and 3", jobAt, steps)
	}
}

// A job whose context ends while it waits is answered with the context's error and
// never runs; a turn of jobs runs those queued when it began, and a decode step waits
// for one turn at most.
func TestJobsWaitBoundedAndHonourTheirContext(t *testing.T) {
	l, _ := schedLocal(t, Config{})
	ctx := context.Background()
	var mu sync.Mutex
	var kinds []int
	l.s.hooks.kind = func(k int, _ bool) { mu.Lock(); kinds = append(kinds, k); mu.Unlock() }
	release := holdLoop(t, l.s)
	cctx, cancel := context.WithCancel(ctx)
	ran := atomic.Int64{}
	errs := make(chan error, 4)
	l.s.SubmitJob(cctx, func() error { ran.Add(1); return nil }, func(err error) { errs <- err })
	for i := 0; i < 3; i++ {
		l.s.SubmitJob(ctx, func() error { ran.Add(1); return nil }, func(err error) { errs <- err })
	}
	res := make(chan error, 1)
	go func() {
		_, err := l.Sample(ctx, "tiny", "", seeded(prompt(6, 1), 1, 8, 1, 1))
		res <- err
	}()
	waitQueued(l.s, 5)
	cancel()
	release()
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	var cancelled, ok int
	for i := 0; i < 4; i++ {
		switch err := <-errs; {
		case errors.Is(err, context.Canceled):
			cancelled++
		case err == nil:
			ok++
		default:
			t.Fatalf("job: %v", err)
		}
	}
	if cancelled != 1 || ok != 3 || ran.Load() != 3 {
		t.Fatalf("%d cancelled, %d ran (%d runs), want 1 and 3", cancelled, ok, ran.Load())
	}
	if st := l.s.Stats(); st.Jobs != 3 || st.MaxJob <= 0 {
		t.Fatalf("stats count %d jobs (longest %s), want the 3 that ran", st.Jobs, st.MaxJob)
	}
	mu.Lock()
	defer mu.Unlock()
	// The three live jobs were queued before the loop was released: one turn runs them
	// all, then the sample's decode steps, no job between them.
	first := slices.Index(kinds, kindJob)
	if first < 0 || len(kinds) < first+4 || !slices.Equal(kinds[first:first+3], []int{kindJob, kindJob, kindJob}) ||
		slices.Contains(kinds[first+3:], kindJob) {
		t.Fatalf("unit kinds %v, want one turn of 3 jobs, then decode steps", kinds)
	}
}
