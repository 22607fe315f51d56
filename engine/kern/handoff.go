package kern

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A product shared across the cores pays for waking them: on the 2-core KVM guest of
// docs/performance.md a goroutine started while its caller keeps working runs on the
// other core 0.1–2 ms later (the idle vCPU's wake-up; 140 µs the median at the start
// of a product's second share), where a caller that waits runs it itself within 20 µs. A
// training step alternates products with serial work, so its products pay the first;
// below a few million multiply-adds a product computes faster on the calling core than
// it waits for the other (a LoRA gradient of 16×576×512: 0.15–0.2 ms alone; three of them
// hot took 0.37 ms on one core and 0.45 ms on two). shareMinWork sets the packed GEMM's
// threshold from the hand-off measured once on the machine at hand, so a machine with
// cheap wake-ups keeps splitting small products. (The one-row decode products keep
// minParallelWork: they are bound by memory, not arithmetic, and one core streams half
// what two do.)

// smallProductRate is the multiply-adds per ns one core sustains on the small products
// the threshold decides (LoRA's thin products, attention's blocks: 24–34 here).
const smallProductRate = 25

// shareMinWorkMax bounds the threshold: a slow or noisy measurement never serialises
// products of more than this many multiply-adds (8M: about a third of a millisecond
// alone). On the KVM guest the measured threshold reaches it, and a 512-token training
// step ran 2 % faster with it than with 4M and 6 % slower with 16M (in-process A/Bs).
const shareMinWorkMax = 1 << 23

// shareMinForce overrides the measurement (tests): a positive value is the threshold.
var shareMinForce = 0

var shareMin struct {
	once sync.Once
	work int
}

// shareMinWork is the multiply-adds from which share splits a product across the cores:
// twice the work one core does in a hand-off's time (splitting saves at most half of
// the product, and must save more than the hand-off), at least minParallelWork.
func shareMinWork() int {
	if shareMinForce > 0 {
		return shareMinForce
	}
	shareMin.once.Do(func() {
		h := handoffCost()
		shareMin.work = min(max(minParallelWork, int(2*smallProductRate*h.Nanoseconds())), shareMinWorkMax)
	})
	return shareMin.work
}

// handoffCost is the median of 9 hand-offs to another core, each after 2 ms of serial
// work on the caller (so the other cores idle as they do between a step's products): the
// time from starting a goroutine until it runs while the caller keeps working, as share's
// caller does (it takes chunks itself rather than waiting), so another core must pick
// the goroutine up. A caller that waited instead would run it itself at once: that
// measure (a fork-join of an empty function, 20 µs here) missed the idle core's wake-up
// (medians of 170–260 µs here). About 20 ms once; a hand-off that has not started after
// 2 ms counts as 2 ms.
func handoffCost() time.Duration {
	var ds []time.Duration
	for range 9 {
		for t0 := time.Now(); time.Since(t0) < 2*time.Millisecond; {
		}
		var started atomic.Int64
		t0 := time.Now()
		go func() { started.Store(int64(time.Since(t0)) + 1) }()
		for started.Load() == 0 && time.Since(t0) < 2*time.Millisecond {
		}
		d := time.Duration(started.Load() - 1)
		if d < 0 {
			d = 2 * time.Millisecond
		}
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}
