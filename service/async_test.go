package service_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
	"github.com/tuft-go/tuft/service"
)

// heldLoop holds sample requests as a model's loop does, with no goroutine per request:
// SampleAsync notes the work and returns; release runs what is held, calling done on the
// caller's goroutine as the loop calls it on its own.
type heldLoop struct {
	*testenv.NoopExecutor
	mu   sync.Mutex
	held []func()
}

func (e *heldLoop) SampleAsync(ctx context.Context, model, lora string, req engine.SampleRequest, done func(engine.SampleResult, error)) {
	e.mu.Lock()
	e.held = append(e.held, func() { done(e.NoopExecutor.Sample(ctx, model, lora, req)) })
	e.mu.Unlock()
}

func (e *heldLoop) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.held)
}

func (e *heldLoop) release() {
	e.mu.Lock()
	held := e.held
	e.held = nil
	e.mu.Unlock()
	for _, f := range held {
		f()
	}
}

// Sample requests of several tenants, held by the model's loop or queued behind their
// tenant's running bound, hold no goroutine each in the service and futures: the process
// has the goroutines it had before they were submitted. Each still resolves, for its
// tenant, once the loop runs it.
func TestHeldSamplesHoldNoGoroutines(t *testing.T) {
	ctx := context.Background()
	exec := &heldLoop{NoopExecutor: testenv.NewNoopExecutor()}
	const tenants, each, runningEach = 4, 50, 20
	svc, fut := startServiceFutures(t, setup{exec: exec, edit: func(cfg *config.Config) { cfg.Limits.MaxRunningPerTenant = runningEach }})
	base := runtime.NumGoroutine()
	ids := map[string][]string{}
	for i := range tenants * each {
		tenant := fmt.Sprint("t", i%tenants)
		id, err := svc.Sample(ctx, tenant, service.SampleInput{BaseModel: testenv.Model, SeqID: int64(i/tenants + 1), Req: engine.SampleRequest{
			Prompt: []int32{1, 2}, NumSamples: 1, Params: engine.SampleParams{MaxTokens: 2, TopK: -1, TopP: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		ids[tenant] = append(ids[tenant], id)
	}
	running := tenants * runningEach
	check.Eventually(t, 10*time.Second, fmt.Sprintf("%d samples held by the loop", running), func() bool { return exec.count() == running })
	if extra := runtime.NumGoroutine() - base; extra > 2 {
		t.Fatalf("%d samples held and %d queued took %d goroutines", running, tenants*each-running, extra)
	}
	pending := func() int {
		n := 0
		for tenant, list := range ids {
			for _, id := range list {
				if r, _ := fut.Get(ctx, tenant, id); !r.Done() {
					n++
				}
			}
		}
		return n
	}
	check.Eventually(t, 20*time.Second, "every sample resolved", func() bool {
		exec.release()
		return pending() == 0
	})
	for tenant, list := range ids {
		for _, id := range list {
			if r, _ := fut.Get(ctx, tenant, id); r.Status != futures.StatusReady {
				t.Fatalf("%s's sample %s: %+v", tenant, id, r.Failure)
			}
		}
	}
}
