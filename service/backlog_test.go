package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/service"
)

// heldExecutor is a model with a 1000-position KV cache whose samples wait for a gate
// and note their tenant.
type heldExecutor struct {
	*testenv.NoopExecutor
	gate    chan struct{}
	tenants chan string
}

func (e *heldExecutor) Models() []backend.ModelInfo {
	mi := e.NoopExecutor.Models()
	mi[0].KVCacheTokens = 1000
	return mi
}

func (e *heldExecutor) Sample(ctx context.Context, model, lora string, req engine.SampleRequest) (engine.SampleResult, error) {
	e.tenants <- backend.TenantFrom(ctx)
	<-e.gate
	return e.NoopExecutor.Sample(ctx, model, lora, req)
}

// SampleAsync is Sample as the backend's asynchronous form calls it (the fake's own
// goroutine stands in for the model's loop).
func (e *heldExecutor) SampleAsync(ctx context.Context, model, lora string, req engine.SampleRequest, done func(engine.SampleResult, error)) {
	go func() { done(e.Sample(ctx, model, lora, req)) }()
}

// A sample request that can never fit the KV cache is a 400 naming the key; a tenant
// flooding the sampling backlog past limits.sample_backlog_factor × the KV cache gets
// 429 with Retry-After, while another tenant still gets in; every sample runs for its
// tenant and carries the sample deadline; cancelling a queued one works through the
// service.
func TestSampleBacklogAndDeadline(t *testing.T) {
	ctx := context.Background()
	exec := &heldExecutor{NoopExecutor: testenv.NewNoopExecutor(), gate: make(chan struct{}), tenants: make(chan string, 64)}
	svc := startService(t, setup{exec: exec, edit: func(cfg *config.Config) {
		cfg.Limits.SampleTimeoutSeconds = 90
		// A model operation reaches the executor as soon as it is runnable: one running
		// operation per tenant keeps the flood's later samples queued (and cancellable as such).
		cfg.Limits.MaxRunningPerTenant = 1
	}})
	sample := func(tenant string, seq int64, prompt, maxTokens int) (string, error) {
		return svc.Sample(ctx, tenant, service.SampleInput{BaseModel: testenv.Model, SeqID: seq, Req: engine.SampleRequest{
			Prompt: make([]int32, prompt), NumSamples: 1, Params: engine.SampleParams{MaxTokens: maxTokens, TopK: -1, TopP: 1}}})
	}
	if _, err := sample("flood", 1, 600, 500); service.KindOf(err) != service.KindInvalid || !strings.Contains(err.Error(), "kv_cache_bytes") {
		t.Fatalf("a request larger than the KV cache: %v", err)
	}
	// Each request weighs 10 + 490 = 500 positions; the backlog bound is 4 × 1000.
	var ids []string
	for i := int64(1); i <= 8; i++ {
		id, err := sample("flood", i+1, 10, 490)
		if err != nil {
			t.Fatalf("request %d within the bound: %v", i, err)
		}
		ids = append(ids, id)
	}
	_, err := sample("flood", 20, 10, 490)
	if service.KindOf(err) != service.KindTooMany || !strings.Contains(err.Error(), "limits.sample_backlog_factor") {
		t.Fatalf("over the backlog: %v", err)
	}
	if e, ok := err.(*service.Error); !ok || e.RetryAfter <= 0 {
		t.Fatalf("no Retry-After: %#v", err)
	}
	victim, err := sample("victim", 1, 10, 490)
	if err != nil {
		t.Fatalf("another tenant over a flooded backlog: %v", err)
	}
	if _, err := sample("victim", 2, 10, 490); err != nil {
		t.Fatalf("the victim's second request, within its share: %v", err)
	}
	if out, err := svc.CancelSample(ctx, "flood", ids[7]); err != nil || out != service.CancelQueued {
		t.Fatalf("cancelling a queued sample: %v %v", out, err)
	}
	if r, err := svc.Retrieve(ctx, "flood", ids[7], 0); err != nil || r.Status != futures.StatusFailed {
		t.Fatalf("the cancelled sample: %+v %v", r, err)
	}
	if _, err := svc.CancelSample(ctx, "victim", ids[0]); service.KindOf(err) != service.KindNotFound {
		t.Fatalf("cancelling another tenant's sample: %v", err)
	}
	// The flood's first sample and the victim's are both runnable (one running operation
	// per tenant); which reaches the executor first is the dispatcher's timing.
	first := <-exec.tenants
	if first != "flood" && first != "victim" {
		t.Fatalf("the first sample ran for %q", first)
	}
	close(exec.gate)
	rec, err := svc.Retrieve(ctx, "victim", victim, 5*time.Second)
	if err != nil || !rec.Done() {
		t.Fatalf("victim: %+v %v", rec, err)
	}
	if d := rec.Deadline.Sub(rec.CreatedAt); d != 90*time.Second {
		t.Fatalf("sample deadline %s after submission, want limits.sample_timeout_seconds (90 s)", d)
	}
	// Every sample ran for its own tenant: the flood's and the victim's both arrive.
	for seen := map[string]bool{first: true}; !seen["flood"] || !seen["victim"]; {
		got := <-exec.tenants
		if got != "flood" && got != "victim" {
			t.Fatalf("a sample ran for %q", got)
		}
		seen[got] = true
	}
}
