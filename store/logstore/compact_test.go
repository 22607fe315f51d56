package logstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	s, err := Open(path, "ns")
	if err != nil {
		t.Fatal(err)
	}
	val := strings.Repeat("x", 512)
	for round := 0; round < 20; round++ {
		for k := 0; k < 40; k++ {
			if err := s.Set(ctx, fmt.Sprintf("k%02d", k), []byte(fmt.Sprintf("%d:%s", round, val)), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Set(ctx, "gone", []byte(val), time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	s.Set(ctx, "last", []byte("1"), 0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		fi, _ := os.Stat(path)
		if fi.Size() < compactMin {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("file still %d bytes: not compacted", fi.Size())
		}
		time.Sleep(10 * time.Millisecond)
	}
	check := func(s *Store) {
		for k := 0; k < 40; k++ {
			v, err := s.Get(ctx, fmt.Sprintf("k%02d", k))
			if err != nil || !strings.HasPrefix(string(v), "19:") || len(v) != 3+len(val) {
				t.Fatalf("k%02d after compaction: %.10q %v", k, v, err)
			}
		}
		if _, err := s.Get(ctx, "gone"); err == nil {
			t.Fatal("an expired key survived compaction")
		}
	}
	check(s)
	s.Close()
	s, err = Open(path, "ns")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s)
}
