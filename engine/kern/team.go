package kern

import (
	"runtime"
	"sync/atomic"
	"time"
)

// A decode step is a chain of short products (a one-row product of SmolLM2-135M streams
// 0.2–2 MB of weights in 10–100 µs), each split across the cores. split's goroutine per
// share waits for the idle core's wake-up on every product (~75 µs on the Zen 4 KVM
// guest of docs/performance.md, 140 µs on the Xeon), so on two cores a bf16 token
// decoded faster on one thread than on two. Burst keeps the other cores awake for the
// length of a step instead: partner goroutines spin between the step's products and
// take chunks of each split as soon as it is posted, which costs a cache line's
// transfer instead of a wake-up (the products alone, 121 splits a token: 26–30 GB/s
// against 17–21 with a goroutine per share and 19–21 on one core).
//
// Spinning takes a core from whatever else would run on it, which is why it is scoped
// to a burst (a step of the generation loop, not training, where persistent spinning
// workers measured slower) and why a split's chunks are claimed, not assigned: a partner
// the OS or the Go scheduler has not run yet holds nothing back, since the caller takes
// the chunks it has not claimed.

// burstLinger is how long a partner keeps spinning after a burst ends, so that the
// generation loop's next step (after drawing tokens and scheduling) finds it awake.
const burstLinger = time.Millisecond

// spinsPerYield is how many polls a spinning goroutine makes between runtime.Gosched
// calls (a few µs), so that goroutines waiting for its P still run.
const spinsPerYield = 1024

// maxPartners bounds the partners a burst keeps (GOMAXPROCS−1 of them, at most this).
const maxPartners = 63

var team struct {
	active   atomic.Int32 // bursts running (at most one holds the partners)
	partners atomic.Int32 // partner goroutines alive
	width    atomic.Int32 // GOMAXPROCS when the running burst started
	ids      [maxPartners + 1]atomic.Bool
	slot     atomic.Pointer[teamJob]
	burstOff atomic.Bool // SetBurstSpin(false): Burst runs f alone
}

// teamJob is one split posted to the partners: chunks of grain indices of [0, n),
// claimed through next; done counts the finished ones. f gets the worker's number
// (the caller 0, each partner its own in [1, GOMAXPROCS)) with its chunk.
type teamJob struct {
	f                func(w, lo, hi int)
	n, grain, chunks int64
	next, done       atomic.Int64
}

// take runs the job's chunks as worker w until none is left unclaimed.
func (j *teamJob) take(w int) {
	for {
		c := j.next.Add(1) - 1
		if c >= j.chunks {
			return
		}
		lo := c * j.grain
		j.f(w, int(lo), int(min(lo+j.grain, j.n)))
		j.done.Add(1)
	}
}

// SetBurstSpin turns Burst's partners on (the default) or off (engine.cpu_decode_spin):
// off, Burst runs f as a plain call and its products wake the cores as split does.
func SetBurstSpin(on bool) { team.burstOff.Store(!on) }

// Burst runs f with the other cores kept spinning for split's products (see above).
// Bursts do not nest or overlap: a Burst started while another runs, or with one core,
// runs f as a plain call. Results do not depend on it: each chunk of a split computes
// what it would on any goroutine.
func Burst(f func()) {
	w := runtime.GOMAXPROCS(0)
	if w <= 1 || team.burstOff.Load() || !team.active.CompareAndSwap(0, 1) {
		f()
		return
	}
	defer team.active.Store(0)
	team.width.Store(int32(w))
	for p := team.partners.Load(); p < int32(min(w-1, maxPartners)); p = team.partners.Load() {
		if team.partners.CompareAndSwap(p, p+1) {
			go partner()
		}
	}
	f()
}

// partner serves posted splits while a burst runs and for burstLinger after.
func partner() {
	defer team.partners.Add(-1)
	id := 1 // the lowest free number: at most partners are alive, so one is free
	for ; !team.ids[id].CompareAndSwap(false, true); id = id%maxPartners + 1 {
	}
	defer team.ids[id].Store(false)
	var last *teamJob
	var idle time.Time
	for spins := 1; ; spins++ {
		if j := team.slot.Load(); j != nil && j != last {
			if int32(id) >= team.width.Load() {
				return // GOMAXPROCS shrank: its workers' numbers stay below it
			}
			last = j
			j.take(id)
			spins = 0
			idle = time.Time{}
			continue
		}
		if spins%spinsPerYield == 0 {
			if team.active.Load() == 0 {
				if idle.IsZero() {
					idle = time.Now()
				} else if time.Since(idle) > burstLinger {
					return
				}
			} else {
				idle = time.Time{}
			}
			runtime.Gosched()
		}
	}
}

// BurstShare runs f(w, lo, hi) over [0, n) in chunks of grain indices on the partners
// of a running burst and the caller, w numbering the goroutine that runs a chunk (the
// caller 0, a partner its own number below GOMAXPROCS: per-worker scratch indexed by it
// is never shared). It reports false, having run nothing, when no burst runs or another
// split holds the partners (one nested in a chunk, or from another goroutine); the
// caller then shares the work its own way.
func BurstShare(n, grain int, f func(w, lo, hi int)) bool {
	if n <= 0 || team.active.Load() == 0 || team.partners.Load() == 0 {
		return false
	}
	j := &teamJob{f: f, n: int64(n), grain: int64(grain), chunks: int64((n + grain - 1) / grain)}
	if !team.slot.CompareAndSwap(nil, j) {
		return false
	}
	j.take(0)
	for spins := 1; j.done.Load() < j.chunks; spins++ {
		if spins%spinsPerYield == 0 {
			runtime.Gosched() // a partner descheduled by Go may be waiting for this P
		}
	}
	team.slot.Store(nil)
	return true
}

// teamSplit is split on a running burst's partners: two chunks a core, so that a
// partner that starts late takes fewer.
func teamSplit(n, align, w int, f func(lo, hi int)) bool {
	grain := roundUp((n+2*w-1)/(2*w), align)
	return BurstShare(n, grain, func(_, lo, hi int) { f(lo, hi) })
}

// Procs is the goroutines a product may share its work among: GOMAXPROCS, read once
// per burst. Inside a burst it is the burst's width, which also bounds its partners'
// worker numbers; outside, runtime.GOMAXPROCS(0), which takes the scheduler's lock: a
// decode step asked it a few hundred times while the spinning partners' yields took the
// same lock.
func Procs() int {
	if team.active.Load() != 0 {
		if w := team.width.Load(); w > 0 {
			return int(w)
		}
	}
	return runtime.GOMAXPROCS(0)
}

// Bursting reports whether a burst runs with partners awake: work that stays on one
// core because a hand-off would cost more than it saves can share it then.
func Bursting() bool { return team.active.Load() != 0 && team.partners.Load() != 0 }
