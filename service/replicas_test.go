package service_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/store/memory"
)

// lockCheckStore records store calls made while a controller lock of svc is held.
type lockCheckStore struct {
	store.Store
	svc        atomic.Pointer[service.Service]
	mu         sync.Mutex
	violations []string
}

func (l *lockCheckStore) check(op, key string) {
	if s := l.svc.Load(); s != nil && !s.LocksFree() {
		l.mu.Lock()
		l.violations = append(l.violations, op+" "+key)
		l.mu.Unlock()
	}
}

func (l *lockCheckStore) Get(ctx context.Context, key string) ([]byte, error) {
	l.check("Get", key)
	return l.Store.Get(ctx, key)
}

func (l *lockCheckStore) Scan(ctx context.Context, prefix string, fn func(string, []byte) error) error {
	l.check("Scan", prefix)
	return l.Store.Scan(ctx, prefix, fn)
}

func newReplica(t *testing.T, st store.Store, id string) *service.Service {
	t.Helper()
	return startService(t, setup{store: st, edit: func(cfg *config.Config) { cfg.Server.ReplicaID = id }})
}

// A replica asked about a session, run or sampling session another replica owns answers
// with an ElsewhereError naming the owner (the API forwards the request there); another
// tenant's id is a plain 404. The store is read for that only after the controller locks
// are released.
func TestOtherReplicasRecordsAreSettledOutsideTheLocks(t *testing.T) {
	ctx := context.Background()
	shared := memory.New()
	b := newReplica(t, shared, "b")
	se, err := b.CreateSession(ctx, "alice", service.CreateSessionInput{})
	if err != nil {
		t.Fatal(err)
	}
	id, run, err := b.CreateModel(ctx, "alice", service.CreateModelInput{SessionID: se.ID, BaseModel: testenv.Model,
		Lora: engine.LoraConfig{Rank: 2, TrainAttn: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Retrieve(ctx, "alice", id, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	sm, err := b.CreateSamplingSession(ctx, "alice", se.ID, 0, testenv.Model, "")
	if err != nil {
		t.Fatal(err)
	}

	st := &lockCheckStore{Store: shared}
	a := newReplica(t, st, "a")
	st.svc.Store(a)
	calls := map[string]func(tenant string) error{
		"Heartbeat":   func(tn string) error { return a.Heartbeat(ctx, tn, se.ID) },
		"SessionInfo": func(tn string) error { _, err := a.SessionInfo(tn, se.ID); return err },
		"GetRun":      func(tn string) error { _, err := a.GetRun(tn, run); return err },
		"GetInfo":     func(tn string) error { _, err := a.GetInfo(tn, run); return err },
		"CheckRun":    func(tn string) error { return a.CheckRun(tn, run) },
		"UnloadModel": func(tn string) error { _, err := a.UnloadModel(ctx, tn, run); return err },
		"ListCkpts":   func(tn string) error { _, err := a.ListCheckpoints(tn, run); return err },
		"GetSampler":  func(tn string) error { _, err := a.GetSampler(tn, sm.ID); return err },
		"Join":        func(tn string) error { _, err := a.JoinSamplingSession(ctx, tn, sm.ID); return err },
	}
	for name, call := range calls {
		var ee *service.ElsewhereError
		if err := call("alice"); !errors.As(err, &ee) || ee.Owner != "b" {
			t.Errorf("%s on replica a of b's record: %v, want an ElsewhereError naming b", name, err)
		}
		if err := call("bob"); service.KindOf(err) != service.KindNotFound || errors.As(err, new(*service.ElsewhereError)) {
			t.Errorf("%s of another tenant's record: %v, want a plain not-found", name, err)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.violations) > 0 {
		t.Errorf("store calls made under a controller lock: %v", st.violations)
	}
}

// The context length a model is listed with is the one requests on it are held to: the
// executor's, lowered by models[].max_context_length of this server's config.
func TestModelsListTheEnforcedContextLength(t *testing.T) {
	ctx := context.Background()
	svc := startService(t, setup{edit: func(cfg *config.Config) { cfg.Models[0].MaxContextLength = 64 }})
	if ms := svc.Models(); len(ms) != 1 || ms[0].MaxContextLength != 64 {
		t.Fatalf("Models() = %+v, want max_context_length 64", ms)
	}
	se, _ := svc.CreateSession(ctx, "alice", service.CreateSessionInput{})
	sm, err := svc.CreateSamplingSession(ctx, "alice", se.ID, 0, testenv.Model, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.Sample(ctx, "alice", service.SampleInput{SamplingSessionID: sm.ID, Req: engine.SampleRequest{Prompt: make([]int32, 60), NumSamples: 1,
		Params: engine.SampleParams{MaxTokens: 5, Temperature: 1}}})
	if service.KindOf(err) != service.KindInvalid || !strings.Contains(err.Error(), "max_context_length 64") {
		t.Fatalf("60 + 5 tokens on a 64-token model: %v", err)
	}
}
