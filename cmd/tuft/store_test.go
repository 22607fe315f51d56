package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/store/logstore"
)

// `tuft store check` exits non-zero (and prints the offset) for a last write that is there
// in full with a flipped bit, before a start cuts it off and after (finding 9 of issue
// 22: it exited 0).
func TestStoreCheckFailsOnAKeptAsideFlippedTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tuft.db")
	s, err := logstore.Open(path, "ns")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Set(context.Background(), "a", []byte(strings.Repeat("a", 100)), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(context.Background(), "last", []byte(strings.Repeat("L", 100)), 0); err != nil {
		t.Fatal(err)
	}
	killed, _ := os.ReadFile(path) // before the closing mark: as a SIGKILL leaves it
	s.Close()
	killed[len(killed)-10] ^= 1
	if err := os.WriteFile(path, killed, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmdStore([]string{"check", "--path", path}); err == nil || !strings.Contains(err.Error(), "acknowledged") {
		t.Fatalf("check before the open: %v", err)
	}
	s, err = logstore.Open(path, "ns")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	err = cmdStore([]string{"check", "--path", path})
	if err == nil || !strings.Contains(err.Error(), "acknowledged") {
		t.Fatalf("check after the cut: %v", err)
	}
}
