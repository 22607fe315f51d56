package service_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/store/memory"
)

// nanExecutor answers every forward_backward with a NaN loss.
type nanExecutor struct{ *testenv.NoopExecutor }

func (e nanExecutor) ForwardBackward(ctx context.Context, base, lora string, req engine.ForwardRequest) (engine.ForwardResult, error) {
	res, err := e.NoopExecutor.ForwardBackward(ctx, base, lora, req)
	res.Metrics["loss:sum"] = math.NaN()
	return res, err
}

// ForwardBackwardAsync is ForwardBackward as the backend's asynchronous form calls it.
func (e nanExecutor) ForwardBackwardAsync(ctx context.Context, base, lora string, req engine.ForwardRequest, done func(engine.ForwardResult, error)) {
	done(e.ForwardBackward(ctx, base, lora, req))
}

func usageService(t *testing.T, st *memory.Store, ck *clock, ex backend.Executor) *service.Service {
	t.Helper()
	return startService(t, setup{store: st, exec: ex, now: ck.now, edit: func(cfg *config.Config) { cfg.Billing.UsageRetentionDays = 2 }})
}

func trainOnce(t *testing.T, svc *service.Service, tenant, run string, seq int64, tokens int) {
	t.Helper()
	ctx := context.Background()
	d := engine.Datum{Tokens: make([]int32, tokens), LossInputs: map[string]engine.Tensor{
		"target_tokens": {DType: engine.Int64, Shape: []int{tokens}, I64: make([]int64, tokens)}}}
	id, err := svc.ForwardBackward(ctx, tenant, service.OpMeta{ModelID: run, SeqID: seq},
		engine.ForwardRequest{Data: []engine.Datum{d}, LossFn: "cross_entropy", Backward: true})
	if err == nil {
		_, err = svc.Retrieve(ctx, tenant, id, 5*time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Usage falls in the hour it happened, per tenant; buckets past
// billing.usage_retention_days are deleted at the next start (and by the flusher); a
// non-finite loss is listed by name, not stored as a number, and clears last_loss.
func TestUsageBucketsRetentionAndNonFiniteMetrics(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	ck := &clock{t: time.Date(2026, 11, 27, 10, 30, 0, 0, time.UTC)}
	svc := usageService(t, st, ck, nanExecutor{testenv.NewNoopExecutor()})
	sess, _ := svc.CreateSession(ctx, "alice", service.CreateSessionInput{})
	id, run, err := svc.CreateModel(ctx, "alice", service.CreateModelInput{SessionID: sess.ID, BaseModel: testenv.Model,
		Lora: engine.LoraConfig{Rank: 2, TrainAttn: true}})
	if err == nil {
		_, err = svc.Retrieve(ctx, "alice", id, 5*time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	trainOnce(t, svc, "alice", run, 1, 7)
	ck.add(time.Hour)
	trainOnce(t, svc, "alice", run, 2, 5)

	from, to := ck.now().Add(-24*time.Hour), ck.now().Add(time.Hour)
	got, err := svc.UsageBuckets(ctx, "alice", from, to)
	if err != nil || len(got) != 2 || got[0].Tokens != 7 || got[1].Tokens != 5 || !got[1].Hour.Equal(time.Date(2026, 11, 27, 11, 0, 0, 0, time.UTC)) ||
		got[0].Kind != service.UsageTraining || got[0].SessionID != sess.ID || got[0].BaseModel != testenv.Model {
		t.Fatalf("buckets %+v (%v)", got, err)
	}
	if bob, _ := svc.UsageBuckets(ctx, "bob", from, to); len(bob) != 0 {
		t.Fatalf("bob's buckets: %+v", bob)
	}
	pg, err := svc.RunMetrics("alice", run, 0, 10)
	if err != nil || len(pg.Points) != 2 || len(pg.Points[0].NonFinite) != 1 || pg.Points[0].NonFinite[0] != "loss:sum" {
		t.Fatalf("points %+v (%v)", pg.Points, err)
	}
	if _, ok := pg.Points[0].Metrics["loss:sum"]; ok {
		t.Fatalf("a NaN stored as a number: %+v", pg.Points[0])
	}
	if v, _ := svc.GetRun("alice", run); v.LastLoss != nil {
		t.Fatalf("last_loss after a NaN loss: %v", *v.LastLoss)
	}
	if _, err := svc.RunMetrics("bob", run, 0, 10); service.KindOf(err) != service.KindNotFound {
		t.Fatalf("bob reads alice's metrics: %v", err)
	}
	svc.Close() // flushes

	count := func() (n int) {
		_ = st.Scan(ctx, "usage/", func(string, []byte) error { n++; return nil })
		return n
	}
	if n := count(); n != 2 {
		t.Fatalf("%d usage keys stored, want 2", n)
	}
	ck.add(2*24*time.Hour - 10*time.Minute) // the first hour is now past the retention, the second not
	svc = usageService(t, st, ck, testenv.NewNoopExecutor())
	defer svc.Close()
	if n := count(); n != 1 {
		t.Fatalf("%d usage keys after a start past the retention, want 1", n)
	}
	if got, _ := svc.UsageBuckets(ctx, "alice", time.Time{}, ck.now()); len(got) != 1 || got[0].Tokens != 5 {
		t.Fatalf("buckets after the restart: %+v", got)
	}
	if _, err := svc.TenantUsage(ctx, "alice", 3); err == nil || !strings.Contains(err.Error(), "billing.usage_retention_days") {
		t.Fatalf("days past the retention: %v", err)
	}
}
