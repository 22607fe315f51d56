package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/store/memory"
)

// countingStore counts the bytes (key and value) written by Set.
type countingStore struct {
	*memory.Store
	written atomic.Int64
}

func (c *countingStore) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	c.written.Add(int64(len(key) + len(value)))
	return c.Store.Set(ctx, key, value, ttl)
}

func newQuotaService(t *testing.T, st *countingStore, ck *clock, edit func(*config.Config)) *service.Service {
	t.Helper()
	return startService(t, setup{store: st, now: ck.now, edit: edit})
}

// A quota held by a session whose client stopped heartbeating is a 429 with Retry-After
// at that session's expiry (the SDK retries 429s for minutes: waiting helps); the same
// quota held by live clients is a 403 (the SDK does not retry it: waiting would not help).
func TestQuotaHeldBySilentSessionIs429UntilItExpires(t *testing.T) {
	ctx := context.Background()
	ck := &clock{t: time.Unix(1_800_000_000, 0)}
	svc := newQuotaService(t, &countingStore{Store: memory.New()}, ck, func(c *config.Config) {
		c.Limits.MaxRunsPerTenant = 1
		c.Sessions.HeartbeatTimeoutSeconds = 60
	})
	create := func(sess string, seq int64) error {
		id, _, err := svc.CreateModel(ctx, "alice", service.CreateModelInput{SessionID: sess, ModelSeqID: seq, BaseModel: testenv.Model,
			Lora: engine.LoraConfig{Rank: 2, TrainAttn: true}})
		if err == nil {
			_, err = svc.Retrieve(ctx, "alice", id, 5*time.Second)
		}
		return err
	}
	crashed, _ := svc.CreateSession(ctx, "alice", service.CreateSessionInput{})
	if err := create(crashed.ID, 0); err != nil {
		t.Fatal(err)
	}
	restarted, _ := svc.CreateSession(ctx, "alice", service.CreateSessionInput{})
	err := create(restarted.ID, 0)
	if service.KindOf(err) != service.KindForbidden || !strings.Contains(err.Error(), "limits.max_runs_per_tenant") {
		t.Fatalf("over the quota held by a live client: want 403 naming the key, got %v", err)
	}
	ck.add(40 * time.Second) // the first client is silent for 40 s; the second heartbeats
	if err := svc.Heartbeat(ctx, "alice", restarted.ID); err != nil {
		t.Fatal(err)
	}
	err = create(restarted.ID, 0)
	var se *service.Error
	if service.KindOf(err) != service.KindTooMany || !strings.Contains(err.Error(), "limits.max_runs_per_tenant") {
		t.Fatalf("over the quota held by a silent client: want 429 naming the key, got %v", err)
	}
	if errorsAs(err, &se); se.RetryAfter < 20*time.Second || se.RetryAfter > 30*time.Second {
		t.Fatalf("Retry-After %s, want the silent session's expiry (20 s) plus a reaper period", se.RetryAfter)
	}
	// Bob is not affected at any time.
	bs, _ := svc.CreateSession(ctx, "bob", service.CreateSessionInput{})
	if _, _, err := svc.CreateModel(ctx, "bob", service.CreateModelInput{SessionID: bs.ID, BaseModel: testenv.Model,
		Lora: engine.LoraConfig{Rank: 2, TrainAttn: true}}); err != nil {
		t.Fatalf("bob: %v", err)
	}
	ck.add(se.RetryAfter)
	if err := svc.Heartbeat(ctx, "alice", restarted.ID); err != nil {
		t.Fatal(err)
	}
	svc.Reap(ctx)
	if err := create(restarted.ID, 0); err != nil {
		t.Fatalf("after the silent session expired: %v", err)
	}
}

func errorsAs(err error, se **service.Error) {
	if e, ok := err.(*service.Error); ok {
		*se = e
	}
}

// sdkMetadata is user_metadata of the shape clients send (dict[str, str]): n keys.
func sdkMetadata(n int) map[string]any {
	m := make(map[string]any, n)
	for i := range n {
		m[fmt.Sprintf("key_%04d", i)] = fmt.Sprintf("value %d of an experiment's metadata, a path or a hash", i)
	}
	return m
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A heartbeat writes the heartbeat time alone, not the session record with its
// user_metadata, and a session holds its user_metadata once, as JSON (the store keeps
// its own copy). It prints what the old behaviour cost in the same run: the whole record
// per heartbeat, and the decoded map held beside the store's JSON.
func TestHeartbeatAndMetadataCost(t *testing.T) {
	ctx := context.Background()
	ck := &clock{t: time.Unix(1_800_000_000, 0)}
	st := &countingStore{Store: memory.New()}
	svc := newQuotaService(t, st, ck, func(c *config.Config) { c.Sessions.HeartbeatTimeoutSeconds = 60 })
	md := sdkMetadata(400)
	raw, _ := json.Marshal(md)
	const n = 100

	// Held: n sessions in the service (and the store) ...
	before := heapInUse()
	var ids []string
	for range n {
		se, err := svc.CreateSession(ctx, "alice", service.CreateSessionInput{UserMetadata: md, Tags: []string{"rl"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, se.ID)
	}
	held := heapInUse() - before
	// ... against the old way: each session's decoded map, plus the store's JSON.
	before = heapInUse()
	old := make([]map[string]any, n)
	for i := range old {
		_ = json.Unmarshal(raw, &old[i])
	}
	oldHeld := heapInUse() - before + uint64(n*len(raw))
	runtime.KeepAlive(old)

	// Written per heartbeat, against the old way (the whole session record).
	v, err := svc.SessionInfo("alice", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	record, _ := json.Marshal(v.Session)
	w0 := st.written.Load()
	for _, id := range ids {
		if err := svc.Heartbeat(ctx, "alice", id); err != nil {
			t.Fatal(err)
		}
	}
	perBeat := (st.written.Load() - w0) / n
	perByte, oldPerByte := float64(held)/float64(n*len(raw)), float64(oldHeld)/float64(n*len(raw))
	t.Logf("user_metadata %d B per session, %d sessions: held %.2f B per metadata byte (old way %.2f, ratio %.2f); "+
		"written per heartbeat %d B (old way %d B, ratio %.0f)", len(raw), n, perByte, oldPerByte, oldPerByte/perByte,
		perBeat, len(record), float64(len(record))/float64(perBeat))
	if perBeat > 128 {
		t.Fatalf("a heartbeat wrote %d bytes: the session record is still rewritten", perBeat)
	}
	if perByte > 2.6 || oldPerByte/perByte < 1.3 {
		t.Fatalf("held %.2f B per metadata byte (old way %.2f): user_metadata is still held decoded", perByte, oldPerByte)
	}

	// The heartbeat time survives a restart without the record being rewritten: a
	// session heartbeated 50 s after its creation does not expire 70 s after it.
	ck.add(50 * time.Second)
	if err := svc.Heartbeat(ctx, "alice", ids[0]); err != nil {
		t.Fatal(err)
	}
	svc.Close()
	svc2 := newQuotaService(t, st, ck, func(c *config.Config) { c.Sessions.HeartbeatTimeoutSeconds = 60 })
	ck.add(20 * time.Second)
	svc2.Reap(ctx)
	if err := svc2.Heartbeat(ctx, "alice", ids[0]); err != nil {
		t.Fatalf("the restored heartbeat was lost: %v", err)
	}
	if err := svc2.Heartbeat(ctx, "alice", ids[1]); service.KindOf(err) != service.KindNotFound {
		t.Fatalf("a session silent for 70 s must have expired: %v", err)
	}
	// And the metadata reads back as it was given.
	v, _ = svc2.SessionInfo("alice", ids[0])
	if got := v.UserMetadata.Map(); len(got) != len(md) || got["key_0007"] != md["key_0007"] {
		t.Fatalf("user_metadata after a restart: %d keys", len(got))
	}
}
