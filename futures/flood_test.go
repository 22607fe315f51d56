package futures

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// TestOverLimitFloodIsRaceFree floods Submit from two tenants at a small per-tenant limit
// while the pool's workers drain it: the answers over the limit (429 with Retry-After)
// must be computed under the lock the workers write the pools under. Run with -race; the
// bug it guards against crashed the process ("concurrent map iteration and map write").
func TestOverLimitFloodIsRaceFree(t *testing.T) {
	m := newManager(t, Options{MaxQueuedPerTenant: 4, Workers: 4})
	var over, okCount atomic.Int64
	var wg sync.WaitGroup
	for _, tenant := range []string{"a", "b"} {
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 400; i++ {
					_, err := m.Submit(context.Background(), Task{Tenant: tenant, Pool: "p", OpType: "sample", Run: ok(`{}`)})
					var ol *OverLimitError
					switch {
					case err == nil:
						okCount.Add(1)
					case errors.As(err, &ol):
						if ol.RetryAfter <= 0 || ol.Limit != 4 {
							t.Errorf("over-limit answer %+v", ol)
							return
						}
						over.Add(1)
					default:
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if okCount.Load() == 0 || over.Load() == 0 {
		t.Fatalf("the flood should both pass and hit the limit: %d accepted, %d over the limit", okCount.Load(), over.Load())
	}
	t.Logf("%d accepted, %d answered 429", okCount.Load(), over.Load())
}
