package kern

import (
	"slices"
	"sync"
	"time"
)

// A product shared across the cores pays for waking them: on the 2-core KVM guest of
// docs/performance.md a fork-join after a few milliseconds of serial work takes 20–65 µs
// (the idle vCPU's wake-up), back to back under 1.5 µs. A training step alternates
// products with serial work, so its products pay the first; below a few million
// multiply-adds a product computes faster on the calling core than it waits for the other
// (a LoRA gradient of 16×576×512: 0.15–0.2 ms alone). shareMinWork sets the packed GEMM's
// threshold from the hand-off measured once on the machine at hand, so a machine with
// cheap wake-ups keeps splitting small products. (The one-row decode products keep
// minParallelWork: they are bound by memory, not arithmetic, and one core streams half
// what two do.)

// smallProductRate is the multiply-adds per ns one core sustains on the small products
// the threshold decides (LoRA's thin products, attention's blocks: 24–34 here).
const smallProductRate = 25

// shareMinWorkMax bounds the threshold: a slow or noisy measurement never serialises
// products of more than this many multiply-adds (8M: about half a millisecond alone).
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

// handoffCost is the median of 9 fork-joins of an empty function, each after 2 ms of
// serial work on the caller (so the other cores idle as they do between a step's
// products): 18 ms once.
func handoffCost() time.Duration {
	var ds []time.Duration
	for range 9 {
		for t0 := time.Now(); time.Since(t0) < 2*time.Millisecond; {
		}
		t0 := time.Now()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { wg.Done() }()
		wg.Wait()
		ds = append(ds, time.Since(t0))
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}
