package futures

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/store/logstore"
)

// storedStatus reads a future's persisted record ("" when absent).
func storedStatus(t *testing.T, st store.Store, id string) Status {
	t.Helper()
	b, err := st.Get(context.Background(), keyFuture+id)
	if errors.Is(err, store.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r.Status
}

func openStore(t *testing.T, path string) store.Store {
	t.Helper()
	st, err := logstore.Open(path, "test")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// On the embedded store a fast operation costs one write (its result); one that stays
// unresolved past acceptDelay has its acceptance written too, and the result still wins.
func TestQueuedStoreWritesAcceptanceOnlyForSlowOperations(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "f.db"))
	defer st.Close()
	m := newManager(t, Options{Store: st})

	release := make(chan struct{})
	slow, err := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: func(context.Context) (Result, error) {
		<-release
		return Result{Kind: "json", Body: []byte(`"slow"`)}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for storedStatus(t, st, slow) == "" {
		if time.Now().After(deadline) {
			t.Fatal("the acceptance of a long operation was never written")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s := storedStatus(t, st, slow); s == StatusReady || s == StatusFailed {
		t.Fatalf("unfinished future stored as %s", s)
	}
	close(release)
	wait(t, m, "a", slow)
	if s := storedStatus(t, st, slow); s != StatusReady {
		t.Fatalf("finished future stored as %q", s)
	}

	fast, _ := m.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: ok(`"fast"`)})
	wait(t, m, "a", fast)
	// Proving an absence: a stray acceptance write (its timer fires after acceptDelay)
	// would have landed within twice that. No event marks "never", so this waits.
	time.Sleep(2 * acceptDelay)
	if s := storedStatus(t, st, fast); s != StatusReady {
		t.Fatalf("fast future stored as %q, want %s", s, StatusReady)
	}
}

// A future whose acceptance had not reached the file when the process died is answered
// after the restart like one the restart abandoned; unknown ids of this process are 404.
func TestLostAcceptanceIsReportedAsRestarted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.db")
	st := openStore(t, path)
	m1, _ := New(testOptions(Options{Store: st}))
	// Accepted a second ago, never written: the process died first.
	lost := newIDAt(time.Now().Add(-time.Second))
	done, _ := m1.Submit(context.Background(), Task{Tenant: "a", Pool: "p", Run: ok(`"kept"`)})
	wait(t, m1, "a", done)
	st.Close()
	// Ids carry milliseconds, and one made in the millisecond a process started counts as
	// that process's (lostFuture). A real restart takes far longer than a millisecond;
	// this one may not, so it starts the next process in a later millisecond.
	created, _ := idTime(done)
	for !time.Now().Truncate(time.Millisecond).After(created) {
		time.Sleep(time.Millisecond)
	}

	st2 := openStore(t, path)
	defer st2.Close()
	m2 := newManager(t, Options{Store: st2})
	if _, err := m2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, err := m2.Get(context.Background(), "b", lost)
	if err != nil || r.Status != StatusFailed || r.Failure.Category != CategoryServer || !strings.Contains(r.Failure.Message, "restarted") {
		t.Fatalf("lost future after restart: %+v %v", r, err)
	}
	if r, err := m2.Get(context.Background(), "a", done); err != nil || string(r.Result.Body) != `"kept"` {
		t.Fatalf("completed future after restart: %+v %v", r, err)
	}
	// Another tenant's id from before the restart gets the same answer as an id that was
	// never stored: nothing tells whether it exists.
	foreign, err := m2.Get(context.Background(), "b", done)
	if err != nil || foreign.Status != r.Status || foreign.Failure == nil || foreign.Failure.Message != r.Failure.Message || foreign.Result != nil {
		t.Fatalf("another tenant's stored future: %+v %v, want the answer of a lost one: %+v", foreign, err, r)
	}
	if rw, err := m2.Wait(context.Background(), "b", done, time.Millisecond); err != nil || rw.Failure == nil || rw.Failure.Message != r.Failure.Message {
		t.Fatalf("another tenant's stored future, long-polled: %+v %v", rw, err)
	}
	for _, id := range []string{newID(), "req_garbage", "req_" + strings.Repeat("z", 26)} {
		if _, err := m2.Get(context.Background(), "a", id); !errors.Is(err, ErrNotFound) {
			t.Errorf("unknown id %s: %v, want not found", id, err)
		}
	}
}

// After a restart, a resubmission of an ordered operation that completed before it gets
// the same request id (dedupe from the rebuilt index), a different payload gets a conflict.
func TestDedupeSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.db")
	st := openStore(t, path)
	m1, _ := New(testOptions(Options{Store: st}))
	task := Task{Tenant: "a", QueueKey: "run-1", Ordered: true, SeqID: 1, Pool: "p", PayloadHash: "h1", Run: ok(`1`)}
	id, err := m1.Submit(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, m1, "a", id)
	_ = m1.Shutdown(context.Background())
	st.Close()

	st2 := openStore(t, path)
	defer st2.Close()
	m2 := newManager(t, Options{Store: st2})
	if _, err := m2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	m2.SetNextSeq("run-1", m2.RecoveredNextSeq("run-1"))
	again, err := m2.Submit(context.Background(), task)
	if err != nil || again != id {
		t.Fatalf("resubmission after restart: %q %v, want %q", again, err, id)
	}
	task.PayloadHash = "other"
	var ce *ConflictError
	if _, err := m2.Submit(context.Background(), task); !errors.As(err, &ce) {
		t.Fatalf("changed payload after restart: %v, want a conflict", err)
	}
}

func TestIDsSortByCreationTime(t *testing.T) {
	now := time.Now()
	a, b := newIDAt(now), newIDAt(now.Add(time.Millisecond))
	if !(a < b) {
		t.Fatalf("%s !< %s", a, b)
	}
	if ta, ok := idTime(a); !ok || !ta.Equal(now.Truncate(time.Millisecond)) {
		t.Fatalf("idTime(%s) = %v %v, want %v", a, ta, ok, now.Truncate(time.Millisecond))
	}
	if ta, ok := idTime(newID()); !ok || time.Since(ta) > time.Minute || time.Since(ta) < 0 {
		t.Fatalf("idTime of a new id = %v %v", ta, ok)
	}
}

// A resolved future leaves memory after KeepInMemory; it is then answered from the store,
// and a resubmission still gets the same id (or a conflict for another payload).
func TestResolvedFuturesMoveToTheStore(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "f.db"))
	defer st.Close()
	clock := newTestClock()
	m := newManager(t, Options{Store: st, KeepInMemory: 10 * time.Millisecond, Now: clock.Now})
	task := Task{Tenant: "a", QueueKey: "run-1", Ordered: true, SeqID: 1, Pool: "p", PayloadHash: "h1", Run: ok(`"one"`)}
	id, err := m.Submit(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, m, "a", id)
	inMemory := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		_, ok := m.entries[id]
		return ok
	}
	m.sweep(clock.Add(10 * time.Millisecond))
	if !inMemory() {
		t.Fatal("the resolved future left memory before KeepInMemory passed")
	}
	m.sweep(clock.Add(time.Millisecond))
	if inMemory() {
		t.Fatal("the resolved future stayed in memory after KeepInMemory")
	}
	if r, err := m.Get(context.Background(), "a", id); err != nil || string(r.Result.Body) != `"one"` {
		t.Fatalf("from the store: %+v %v", r, err)
	}
	if again, err := m.Submit(context.Background(), task); err != nil || again != id {
		t.Fatalf("resubmission: %q %v, want %q", again, err, id)
	}
	task.PayloadHash = "other"
	var ce *ConflictError
	if _, err := m.Submit(context.Background(), task); !errors.As(err, &ce) {
		t.Fatalf("changed payload: %v", err)
	}
}
