package service

import (
	"context"
	"fmt"
	"time"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/futures"
)

// checkBacklog answers with backpressure when a base model holds too much sampling
// work. Accepted sample requests that have not finished weigh the KV-cache positions
// they may take (prompt once, max_tokens per sample; futures.Task.Weight). The model's
// scheduler never fails a request for lack of memory (it waits, or preempts and
// recomputes), so without a bound a flood would only make every request slower: past
// limits.sample_backlog_factor times the KV cache, a tenant above an equal share is
// answered 429 and the SDK backs off and resends (its asample path sends
// X-Tinker-Sampling-Backpressure and retries a 429 after 1 s). A tenant with nothing in
// the backlog always gets a request in.
func (s *Service) checkBacklog(base, tenant string, weight, capacity int) error {
	if capacity <= 0 {
		return nil
	}
	limit := int(s.cfg.Limits.SampleBacklogFactor * float64(capacity))
	total, byTenant := s.fut.Backlog(base)
	mine := byTenant[tenant]
	if total+weight <= limit || mine == 0 {
		return nil
	}
	share := limit / len(byTenant)
	if mine+weight <= share {
		return nil
	}
	return &Error{Kind: KindTooMany, RetryAfter: time.Second, Msg: fmt.Sprintf(
		"sampling backpressure: %s holds sample requests for %d KV positions, over limits.sample_backlog_factor %g × its KV cache of %d "+
			"positions, and this tenant's %d are above its share of %d; retry shortly", base, total, s.cfg.Limits.SampleBacklogFactor, capacity, mine, share)}
}

// submit queues a task whose operation runs for its tenant: the model's scheduler
// shares compute and memory by it (backend.WithTenant).
func (s *Service) submit(ctx context.Context, t futures.Task) (string, error) {
	tenant := t.Tenant
	if run := t.Run; run != nil {
		t.Run = func(ctx context.Context) (futures.Result, error) { return run(backend.WithTenant(ctx, tenant)) }
	}
	if start := t.Start; start != nil {
		t.Start = func(ctx context.Context, c *futures.Completion) { start(backend.WithTenant(ctx, tenant), c) }
	}
	return s.fut.Submit(ctx, t)
}
