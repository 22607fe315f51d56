package bolt

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	bbolt "go.etcd.io/bbolt"
)

// Queued writes to one key land in queue order, even when they share a transaction.
func TestQueuedWritesKeepTheirOrder(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "q.db"), "ns")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	const n = 500
	wg.Add(n)
	for i := 0; i < n; i++ {
		s.SetQueued(context.Background(), "k", fmt.Appendf(nil, "%d", i), 0, func(err error) {
			if err != nil {
				t.Error(err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	v, err := s.Get(context.Background(), "k")
	if err != nil || string(v) != fmt.Sprint(n-1) {
		t.Fatalf("after %d queued writes: %q %v", n, v, err)
	}
}

// One failing write in a group fails alone; the others commit.
func TestFailingWriteDoesNotSinkItsGroup(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "g.db"), "ns")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	boom := errors.New("boom")
	block := make(chan struct{})
	// Hold the committer in a transaction so the next writes queue into one group.
	go s.gc.do(func(*bbolt.Tx) error { <-block; return nil })
	errs := make([]chan error, 3)
	for i := range errs {
		errs[i] = make(chan error, 1)
		i := i
		fn := func(tx *bbolt.Tx) error {
			if i == 1 {
				return boom
			}
			return tx.Bucket(s.bucket).Put(fmt.Appendf(nil, "k%d", i), wrap([]byte("v"), 0))
		}
		s.gc.enqueue(fn, func(err error) { errs[i] <- err })
	}
	close(block)
	for i, ch := range errs {
		err := <-ch
		if (i == 1) != errors.Is(err, boom) {
			t.Errorf("write %d: %v", i, err)
		}
	}
	for _, k := range []string{"k0", "k2"} {
		if _, err := s.Get(context.Background(), k); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
}

func TestWritesAfterCloseFail(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "c.db"), "ns")
	if err != nil {
		t.Fatal(err)
	}
	gc := s.gc
	s.Close()
	if err := gc.do(func(*bbolt.Tx) error { return nil }); !errors.Is(err, errClosed) {
		t.Fatalf("write after close: %v", err)
	}
}
