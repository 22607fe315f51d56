package kern

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSplitPoolCoversEachIndexOnce: split, share and Workers through the persistent workers run
// every index exactly once, whether the workers are spinning or parked (pauses longer
// than poolSpin between calls), when fork-joins run at the same time from several
// goroutines (some shares then run on new goroutines) and when they nest.
func TestSplitPoolCoversEachIndexOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{2, 3, 4} {
		runtime.GOMAXPROCS(procs)
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for it := 0; it < 60; it++ {
					n := 97 + it*13
					hits := make([]atomic.Int32, n)
					body := func(lo, hi int) {
						for i := lo; i < hi; i++ {
							hits[i].Add(1)
						}
					}
					switch it % 4 {
					case 0:
						split(n, minParallelWork, 4, body)
					case 1:
						share(n, minParallelWork, 4, 1, body)
					case 2: // Workers: jobs by index, each worker's number used by one goroutine at a time
						inUse := make([]atomic.Bool, procs)
						nw := Workers(n, func(w, j int) {
							if !inUse[w].CompareAndSwap(false, true) {
								t.Errorf("worker number %d ran on two goroutines at once", w)
							}
							hits[j].Add(1)
							inUse[w].Store(false)
						})
						if nw < 1 || nw > procs {
							t.Errorf("Workers ran %d workers with GOMAXPROCS %d", nw, procs)
						}
					default: // nested: each share splits its range again
						split(n, minParallelWork, 1, func(lo, hi int) {
							split(hi-lo, minParallelWork, 1, func(a, b int) { body(lo+a, lo+b) })
						})
					}
					for i := range hits {
						if h := hits[i].Load(); h != 1 {
							t.Errorf("procs %d, n %d, pattern %d: index %d ran %d times", procs, n, it%4, i, h)
							return
						}
					}
					if it%10 == 0 {
						time.Sleep(3 * poolSpin) // the workers park
					}
				}
			}()
		}
		wg.Wait()
	}
}
