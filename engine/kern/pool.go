package kern

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The cores' hand-offs. A decode step of a 135M model is some 150 fork-joins (a layer's
// products, attention, the head), each a few tens of microseconds of work: starting a
// goroutine per share wakes a parked thread (a futex and, in a VM, an inter-processor
// interrupt) and the caller parks again to wait, which costs as much as the share
// itself. The pool's workers stay, spin for a while after each share (yielding to any
// other goroutine that wants the core), then park; the caller spins on the join as
// briefly before parking. Which goroutine runs a chunk never changes what the chunk
// computes, so results do not depend on the pool.

// usePool routes split and share through the persistent workers (false: a goroutine
// per share, as before the pool).
const usePool = true

// poolSpin is how long a worker (or a caller waiting for its shares) polls before it
// parks: longer than the gaps between a decode step's products, short enough that an
// idle engine leaves the cores to others.
const poolSpin = 50 * time.Microsecond

// poolPreempted is a gap between two polls that means the OS ran something else on the
// core: the machine has more runnable threads than cores, where a spinning goroutine
// takes the core from the work it waits for. Spinning then stops for poolCalm.
const (
	poolPreempted = 20 * time.Microsecond
	poolCalm      = 100 * time.Millisecond
)

// spinOffUntil is when spinning may resume (Unix nanoseconds) after a poll saw the
// machine oversubscribed.
var spinOffUntil atomic.Int64

// spin polls ready for up to poolSpin, yielding to other goroutines between polls, and
// reports whether it became true; it gives up at once while the machine is
// oversubscribed.
func spin(ready func() bool) bool {
	t0 := time.Now()
	if t0.UnixNano() < spinOffUntil.Load() {
		return ready()
	}
	last := t0
	for {
		if ready() {
			return true
		}
		runtime.Gosched()
		now := time.Now()
		if now.Sub(last) > poolPreempted {
			spinOffUntil.Store(now.Add(poolCalm).UnixNano())
			return ready()
		}
		if now.Sub(t0) > poolSpin {
			return ready()
		}
		last = now
	}
}

// join is one fork-join: its shares, which the caller and the workers it woke claim in
// turn (a worker the OS has not run yet leaves its share to the caller instead of holding
// the join back), the shares not yet finished, and the caller's wake-up when it parked
// waiting for them.
type join struct {
	f       func(lo, hi int)
	bounds  []int
	next    atomic.Int32 // the next unclaimed share
	pending atomic.Int32 // shares not finished
	waiting atomic.Bool
	wake    chan struct{}
}

// work runs shares until none is left unclaimed.
func (j *join) work() {
	shares := int32(len(j.bounds) - 1)
	for {
		i := j.next.Add(1) - 1
		if i >= shares {
			return
		}
		j.f(j.bounds[i], j.bounds[i+1])
		if j.pending.Add(-1) == 0 && j.waiting.Load() {
			select {
			case j.wake <- struct{}{}:
			default:
			}
		}
	}
}

// wait returns when every share is done: spinning first, then parked.
func (j *join) wait() {
	if spin(func() bool { return j.pending.Load() == 0 }) {
		return
	}
	j.waiting.Store(true)
	if j.pending.Load() == 0 {
		return
	}
	<-j.wake
}

// poolWorker is one persistent goroutine.
type poolWorker struct {
	busy   atomic.Bool // taken by a fork-join until the worker is done with it
	job    atomic.Pointer[join]
	parked atomic.Bool
	wake   chan struct{}
}

func (w *poolWorker) loop() {
	for {
		j := w.next()
		j.work()
		w.job.Store(nil)
		w.busy.Store(false)
	}
}

// next waits for a fork-join: spinning, then parked (a wake-up without one, left from a
// race between parking and a hand-off, goes back to waiting).
func (w *poolWorker) next() *join {
	for {
		if spin(func() bool { return w.job.Load() != nil }) {
			return w.job.Load()
		}
		w.parked.Store(true)
		if j := w.job.Load(); j != nil {
			w.parked.Store(false)
			return j
		}
		<-w.wake
		w.parked.Store(false)
	}
}

var (
	poolMu      sync.Mutex
	poolWorkers atomic.Pointer[[]*poolWorker]
)

// workersFor returns at least n persistent workers, starting any missing.
func workersFor(n int) []*poolWorker {
	if p := poolWorkers.Load(); p != nil && len(*p) >= n {
		return *p
	}
	poolMu.Lock()
	defer poolMu.Unlock()
	var ws []*poolWorker
	if p := poolWorkers.Load(); p != nil {
		ws = *p
	}
	for len(ws) < n {
		w := &poolWorker{wake: make(chan struct{}, 1)}
		go w.loop()
		ws = append(ws[:len(ws):len(ws)], w)
	}
	poolWorkers.Store(&ws)
	return ws
}

// handOff gives j to an idle worker among ws; with none idle (other fork-joins running
// at the same time, or this one nested in a share) the caller's claims cover the shares.
func handOff(ws []*poolWorker, j *join) {
	for _, w := range ws {
		if w.busy.CompareAndSwap(false, true) {
			w.job.Store(j)
			if w.parked.Load() {
				select {
				case w.wake <- struct{}{}:
				default:
				}
			}
			return
		}
	}
}

// forkJoin runs f over each range (bounds[i], bounds[i+1]) on the calling goroutine and
// up to len(bounds)−2 of the pool's workers, each claiming ranges until none is left,
// and returns when all are done.
func forkJoin(bounds []int, f func(lo, hi int)) {
	shares := len(bounds) - 1
	j := &join{f: f, bounds: bounds, wake: make(chan struct{}, 1)}
	j.pending.Store(int32(shares))
	ws := workersFor(shares - 1)[:shares-1]
	for i := 1; i < shares; i++ {
		handOff(ws, j)
	}
	j.work()
	j.wait()
}

// Workers runs f(w, j) for every job j in [0, n), handed out in order to up to
// GOMAXPROCS goroutines numbered w (the caller is 0, the others the pool's workers), and
// returns how many ran: for jobs of uneven size whose results do not depend on which
// goroutine runs them (attention's heads), with per-goroutine scratch indexed by w.
func Workers(n int, f func(w, j int)) int {
	nw := min(runtime.GOMAXPROCS(0), n)
	if nw <= 1 {
		for j := 0; j < n; j++ {
			f(0, j)
		}
		return 1
	}
	var next atomic.Int64
	work := func(w int) {
		for {
			j := int(next.Add(1)) - 1
			if j >= n {
				return
			}
			f(w, j)
		}
	}
	if !usePool {
		var wg sync.WaitGroup
		for w := 1; w < nw; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				work(w)
			}()
		}
		work(0)
		wg.Wait()
		return nw
	}
	bounds := make([]int, nw+1)
	for i := range bounds {
		bounds[i] = i
	}
	forkJoin(bounds, func(w, _ int) { work(w) })
	return nw
}
