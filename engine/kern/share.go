package kern

import (
	"sync"
	"sync/atomic"
)

// share runs f over [0, n) in chunks that up to GOMAXPROCS goroutines, the caller among
// them, take in turn until none is left: about four chunks per goroutine, each a
// multiple of align and at least least (when n allows), at most mc when align is a
// multiple of mr, as many as divide evenly among the goroutines where that is as fast
// (shareGrain). A
// core slowed by other work (a shared machine, a busy hypervisor) then takes fewer
// chunks instead of holding the whole product back: with split's one contiguous half
// per core, one core sat idle through 29 % of a training step on the loaded 2-core
// machine, waiting for the other's half of a product. Chunk boundaries are whole tiles
// and each tile is computed the same way whichever goroutine takes it, so the result
// does not depend on the chunking or the number of cores. In a burst (team.go) the
// chunks go to its awake partners from minParallelWork, without a hand-off to pay for.
func share(n, work, align, least int, f func(lo, hi int)) {
	w := Procs()
	burst := Bursting() // partners awake: no hand-off to pay for
	if w <= 1 || n < 2*align || work < minParallelWork || !burst && work < shareMinWork() {
		f(0, n)
		return
	}
	grain := shareGrain(n, w, align, least)
	chunks := (n + grain - 1) / grain
	if chunks < 2 {
		f(0, n)
		return
	}
	if burst {
		if BurstShare(n, grain, func(_, lo, hi int) { f(lo, hi) }) {
			return
		}
		if work < shareMinWork() { // another split holds the partners
			f(0, n)
			return
		}
	}
	var next atomic.Int64
	take := func() {
		for {
			c := int(next.Add(1)) - 1
			if c >= chunks {
				return
			}
			lo := c * grain
			f(lo, min(lo+grain, n))
		}
	}
	var wg sync.WaitGroup
	for g := 1; g < min(w, chunks); g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			take()
		}()
	}
	take()
	wg.Wait()
}

// shareGrain is share's chunk: about a quarter of a goroutine's share, at least least,
// a multiple of align and, when align is a multiple of mr, at most mc (a chunk's rows of
// A stay one packed block). Among that and the chunks that make the count a multiple of
// w, it takes the one whose busiest goroutine, taking chunks in turn, has the fewest
// indices (ties: the larger chunk). A 128-row prompt in 48-row chunks made three, and a
// core sat idle through a fifth of each product (docs/performance.md, nineteenth pass).
func shareGrain(n, w, align, least int) int {
	limit := func(g int) int {
		if align%mr == 0 {
			g = min(g, mc)
		}
		return g
	}
	best := limit(roundUp(max((n+4*w-1)/(4*w), least), align))
	c := (n + best - 1) / best
	if r := c % w; r != 0 {
		for _, cc := range []int{c - r, c - r + w} {
			if cc < w {
				continue
			}
			g := roundUp((n+cc-1)/cc, align)
			if g < least || limit(g) != g {
				continue
			}
			if b, gb := busiest(n, g, w), busiest(n, best, w); b < gb || b == gb && g > best {
				best = g
			}
		}
	}
	return best
}

// busiest is the most indices of [0, n) any of w goroutines gets when they take chunks
// of grain in turn, one after another.
func busiest(n, grain, w int) int {
	chunks := (n + grain - 1) / grain
	most := 0
	for i := 0; i < w && i < chunks; i++ {
		got := 0
		for c := i; c < chunks; c += w {
			got += min(grain, n-c*grain)
		}
		most = max(most, got)
	}
	return most
}
