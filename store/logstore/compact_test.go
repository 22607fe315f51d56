package logstore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Overwrites and expired keys are dropped by compaction; every live value survives it
// and a reopen.
func TestCompactionKeepsLiveDataAndShrinksTheFile(t *testing.T) {
	compactMin = 64 << 10
	defer func() { compactMin = 64 << 20 }()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	s, err := Open(path, "ns", WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	// The commit goroutine reads fault only once a write is queued.
	var compactions atomic.Int64
	s.d.fault = func(point string) {
		if point == "compact-renamed" {
			compactions.Add(1)
		}
	}
	val := strings.Repeat("x", 512)
	s.Set(ctx, "gone", []byte(val), time.Millisecond)
	clock.Add(int64(time.Second)) // "gone" has expired: every compaction below drops it
	for round := 0; round < 20; round++ {
		for k := 0; k < 40; k++ {
			if err := s.Set(ctx, fmt.Sprintf("k%02d", k), []byte(fmt.Sprintf("%d:%s", round, val)), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Set(ctx, "last", []byte("1"), 0)
	check := func(s *Store) {
		for k := 0; k < 40; k++ {
			v, err := s.Get(ctx, fmt.Sprintf("k%02d", k))
			if err != nil || !strings.HasPrefix(string(v), "19:") || len(v) != 3+len(val) {
				t.Fatalf("k%02d after compaction: %.10q %v", k, v, err)
			}
		}
		if _, err := s.Get(ctx, "gone"); err == nil {
			t.Fatal("an expired key is served")
		}
	}
	check(s)
	s.Close() // waits for the commit goroutine, and so for the compaction it runs after a write
	if compactions.Load() == 0 {
		t.Fatal("never compacted")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) >= int(compactMin) {
		t.Fatalf("file still %d bytes after compaction", len(b))
	}
	if bytes.Contains(b, []byte("ns\x00gone")) {
		t.Fatal("an expired key survived compaction")
	}
	s, err = Open(path, "ns", WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s)
}
