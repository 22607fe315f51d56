package service_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/store/memory"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

type enc struct{}

func (enc) CreateModel(string) (futures.Result, error) {
	return futures.Result{Body: []byte("{}")}, nil
}
func (enc) UnloadModel(string) (futures.Result, error) { return futures.Result{}, nil }
func (enc) ForwardBackward(engine.ForwardResult, string) (futures.Result, error) {
	return futures.Result{}, nil
}
func (enc) OptimStep(map[string]float64) (futures.Result, error) { return futures.Result{}, nil }
func (enc) SaveWeights(string) (futures.Result, error)           { return futures.Result{}, nil }
func (enc) SaveWeightsForSampler(string, string) (futures.Result, error) {
	return futures.Result{}, nil
}
func (enc) LoadWeights(string, string) (futures.Result, error) { return futures.Result{}, nil }
func (enc) Sample(engine.SampleResult) (futures.Result, error) { return futures.Result{}, nil }
func (enc) SaveWeightsExternal(service.ExternalResult) (futures.Result, error) {
	return futures.Result{}, nil
}

func TestSessionsWithoutHeartbeatExpireAndReleaseAdapters(t *testing.T) {
	ctx := context.Background()
	ck := &clock{t: time.Unix(1_800_000_000, 0)}
	exec := testenv.NewNoopExecutor()
	svc := startService(t, setup{exec: exec, now: ck.now, edit: func(cfg *config.Config) { cfg.Sessions.HeartbeatTimeoutSeconds = 60 }})
	live, _ := svc.CreateSession(ctx, "alice", service.CreateSessionInput{})
	dead, _ := svc.CreateSession(ctx, "alice", service.CreateSessionInput{})
	var runs []string
	for _, se := range []*service.Session{live, dead} {
		id, run, err := svc.CreateModel(ctx, "alice", service.CreateModelInput{SessionID: se.ID, BaseModel: testenv.Model,
			Lora: engine.LoraConfig{Rank: 2, TrainAttn: true}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Retrieve(ctx, "alice", id, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	ck.add(45 * time.Second)
	if err := svc.Heartbeat(ctx, "alice", live.ID); err != nil {
		t.Fatal(err)
	}
	ck.add(30 * time.Second) // dead: 75 s without a heartbeat; live: 30 s
	svc.Reap(ctx)
	if err := svc.Heartbeat(ctx, "alice", dead.ID); service.KindOf(err) != service.KindNotFound {
		t.Fatalf("expired session's heartbeat: %v", err)
	}
	if err := svc.Heartbeat(ctx, "alice", live.ID); err != nil {
		t.Fatalf("live session expired: %v", err)
	}
	if _, err := svc.ForwardBackward(ctx, "alice", service.OpMeta{ModelID: runs[1], SeqID: 1}, engine.ForwardRequest{}); err == nil {
		t.Fatal("the expired session's run still accepts work")
	}
	// The adapter is gone from the executor; the record stays for the REST API.
	if exec.Has(runs[1]) || !exec.Has(runs[0]) {
		t.Fatalf("adapters after expiry: expired run held %v, live run held %v", exec.Has(runs[1]), exec.Has(runs[0]))
	}
	v, err := svc.GetRun("alice", runs[1])
	if err != nil || v.State != service.RunUnloaded {
		t.Fatalf("expired run record: %+v %v", v.Run, err)
	}
	if v, _ := svc.GetRun("alice", runs[0]); v.State == service.RunUnloaded {
		t.Fatal("the live session's run was unloaded")
	}
}

func newTestService(t *testing.T, st *memory.Store, ck *clock) (*service.Service, *testenv.NoopExecutor) {
	t.Helper()
	exec := testenv.NewNoopExecutor()
	return startService(t, setup{store: st, exec: exec, now: ck.now}), exec
}

// Finishing a session releases its runs' adapters and its samplers, and the session's
// operations get 410 (KindGone); another session is untouched.
func TestFinishSessionReleasesResources(t *testing.T) {
	ctx := context.Background()
	svc, exec := newTestService(t, memory.New(), &clock{t: time.Unix(1_800_000_000, 0)})
	var runs []string
	var sessions []*service.Session
	for i := 0; i < 2; i++ {
		se, _ := svc.CreateSession(ctx, "alice", service.CreateSessionInput{})
		id, run, err := svc.CreateModel(ctx, "alice", service.CreateModelInput{SessionID: se.ID, BaseModel: testenv.Model,
			Lora: engine.LoraConfig{Rank: 2, TrainAttn: true}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Retrieve(ctx, "alice", id, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		sessions, runs = append(sessions, se), append(runs, run)
	}
	sm, err := svc.CreateSamplingSession(ctx, "alice", sessions[0].ID, 0, testenv.Model, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.FinishSession(ctx, "alice", sessions[0].ID, service.FinishInterrupted, nil); err != nil {
		t.Fatal(err)
	}
	if exec.Has(runs[0]) || !exec.Has(runs[1]) {
		t.Fatalf("adapters after finish: finished %v, open %v", exec.Has(runs[0]), exec.Has(runs[1]))
	}
	if s, err := svc.GetSampler("alice", sm.ID); err != nil || !s.Closed {
		t.Fatalf("sampler after finish: %+v %v", s, err)
	}
	if err := svc.Heartbeat(ctx, "alice", sessions[0].ID); service.KindOf(err) != service.KindGone {
		t.Fatalf("heartbeat after finish: %v", err)
	}
	if _, err := svc.ForwardBackward(ctx, "alice", service.OpMeta{ModelID: runs[0], SeqID: 1}, engine.ForwardRequest{}); service.KindOf(err) != service.KindGone {
		t.Fatalf("operation after finish: %v", err)
	}
	if err := svc.Heartbeat(ctx, "alice", sessions[1].ID); err != nil {
		t.Fatalf("the other session: %v", err)
	}
}

// optim_step's parameters must be for the run's optimizer.
func TestOptimStepMustMatchTheRunsOptimizer(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	now := time.Unix(1_800_000_000, 0)
	put := func(key string, v any) {
		b, _ := json.Marshal(v)
		if err := st.Set(ctx, key, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	// A run created with another optimizer family (as a later server version could).
	put("session/s1", service.Session{ID: "s1", Tenant: "alice", CreatedAt: now, LastHeartbeat: now})
	put("run/s1:train:0", service.Run{ID: "s1:train:0", Tenant: "alice", SessionID: "s1", BaseModel: testenv.Model,
		Lora: service.LoraRecord{Rank: 2, TrainAttn: true}, State: service.RunReady, NextSeq: 1, Optimizer: "dimuon"})
	svc, _ := newTestService(t, st, &clock{t: now})
	_, err := svc.OptimStep(ctx, "alice", service.OpMeta{ModelID: "s1:train:0", SeqID: 1}, service.OptimParams{Optimizer: "adamw"})
	if service.KindOf(err) != service.KindInvalid || !strings.Contains(err.Error(), "dimuon") {
		t.Fatalf("adamw step on a dimuon run: %v", err)
	}
}
