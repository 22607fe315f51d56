package logstore

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// populate writes n keys, each once, each in a commit of its own, then closes the store.
// It returns the file's bytes and each key's value offset.
func populate(t *testing.T, path string, n int) ([]byte, map[string]int64) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(path, "ns")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := s.Set(ctx, fmt.Sprintf("k%03d", i), []byte(fmt.Sprintf("value %d %s", i, strings.Repeat("x", i%50))), 0); err != nil {
			t.Fatal(err)
		}
	}
	offs := map[string]int64{}
	s.d.mu.RLock()
	for k, e := range s.d.index {
		offs[strings.TrimPrefix(k, "ns\x00")] = e.off
	}
	s.d.mu.RUnlock()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b, offs
}

func want(i int) string { return fmt.Sprintf("value %d %s", i, strings.Repeat("x", i%50)) }

// One flipped bit in the middle of the store is not a torn tail: the store refuses to
// open, says where and what to do, and changes nothing in the file.
func TestBitFlipInTheMiddleStopsTheStart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tuft.db")
	good, offs := populate(t, path, 84)
	bad := bytes.Clone(good)
	at := offs["k040"] + 2
	bad[at] ^= 0x10
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, "ns")
	if err == nil {
		t.Fatal("a store with a flipped bit in its middle opened")
	}
	for _, w := range []string{path, "offset", "tuft store check", "tuft store repair"} {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("the error does not say %q: %v", w, err)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, bad) {
		t.Fatalf("the refused open changed the file (%d → %d bytes)", len(bad), len(after))
	}
}

// Corruption at random offsets: the store either opens with every record intact (the
// damage hit only the end marker of the last session), or refuses to open; Check reports
// the damage; Repair keeps every record whose frame is intact, moves the damaged bytes
// aside, and the store opens again with exactly those records.
func TestCorruptionAtRandomOffsets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "tuft.db")
	good, offs := populate(t, path, 60)
	rng := rand.New(rand.NewPCG(7, uint64(len(good))))
	ctx := context.Background()
	opened, repaired := 0, 0
	defer func() { t.Logf("%d trials opened (only a torn end marker was hit), %d repaired", opened, repaired) }()
	for trial := 0; trial < 40; trial++ {
		bad := bytes.Clone(good)
		at := int64(len(magic)) + rng.Int64N(int64(len(good)-len(magic)))
		if trial%4 == 3 {
			// A run of garbage rather than one bit.
			end := min(at+1+rng.Int64N(200), int64(len(bad)))
			for i := at; i < end; i++ {
				bad[i] = byte(rng.Uint32())
			}
		} else {
			bad[at] ^= 1 << rng.UintN(8)
		}
		if bytes.Equal(bad, good) {
			continue
		}
		p := filepath.Join(dir, fmt.Sprintf("t%02d.db", trial))
		if err := os.WriteFile(p, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := Check(p)
		if err != nil {
			t.Fatalf("trial %d (offset %d): check: %v", trial, at, err)
		}
		if len(rep.Damage) == 0 {
			t.Fatalf("trial %d (offset %d): check found no damage", trial, at)
		}
		var lost []string
		for k, off := range offs {
			for _, d := range rep.Damage {
				if off >= d.Offset && off < d.End {
					lost = append(lost, k)
				}
			}
		}
		s, err := Open(p, "ns")
		if err == nil {
			// Only a torn end may be cut, and only if it held no record.
			if len(lost) > 0 || !rep.Damage[len(rep.Damage)-1].TornTail {
				t.Fatalf("trial %d (offset %d): opened over damage that held %v: %+v", trial, at, lost, rep.Damage)
			}
			s.Close()
			opened++
			continue
		}
		repaired++
		if !strings.Contains(err.Error(), "tuft store repair") {
			t.Fatalf("trial %d: %v", trial, err)
		}
		rr, err := Repair(p)
		if err != nil {
			t.Fatalf("trial %d (offset %d): repair: %v", trial, at, err)
		}
		moved, err := os.ReadFile(rr.DamagedFile)
		if err != nil || int64(len(moved)) != rr.DamagedBytes || rr.DamagedBytes == 0 {
			t.Fatalf("trial %d: damaged bytes file %s: %d bytes, report %d, %v", trial, rr.DamagedFile, len(moved), rr.DamagedBytes, err)
		}
		s, err = Open(p, "ns")
		if err != nil {
			t.Fatalf("trial %d (offset %d): open after repair: %v", trial, at, err)
		}
		isLost := map[string]bool{}
		for _, k := range lost {
			isLost[k] = true
		}
		for i := 0; i < 60; i++ {
			k := fmt.Sprintf("k%03d", i)
			v, err := s.Get(ctx, k)
			switch {
			case isLost[k] && err == nil:
				t.Fatalf("trial %d: %s came back from a damaged frame", trial, k)
			case !isLost[k] && (err != nil || string(v) != want(i)):
				t.Fatalf("trial %d (offset %d): intact record %s after repair: %q %v (damage %+v)", trial, at, k, v, err, rep.Damage)
			}
		}
		s.Close()
	}
}

// An unfinished last write is cut even when parts of it after the damage reached the
// disk (a crash may persist a write's pages out of order): nothing after it was
// acknowledged.
func TestTornLastWriteWithIntactPiecesIsCut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tuft.db")
	s, err := Open(path, "ns")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := s.Set(ctx, fmt.Sprintf("k%03d", i), []byte(want(i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	before := s.d.size
	// One group of three frames, then a crash: its middle frame never reached the disk.
	done := make(chan error, 3)
	s.d.qmu.Lock()
	for _, k := range []string{"x", "y", "z"} {
		_ = s.d.enqueueLocked([]op{{kind: opSet, key: "ns\x00" + k, val: []byte(strings.Repeat(k, 100))}}, func(err error) { done <- err })
	}
	s.d.qmu.Unlock()
	for i := 0; i < 3; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	s.d.mu.RLock()
	yOff := s.d.index["ns\x00y"].off
	s.d.mu.RUnlock()
	b, _ := os.ReadFile(path)
	s.Close()
	torn := bytes.Clone(b[:int64(len(b))-markLen]) // the crash came before the close marker
	for i := yOff; i < yOff+50; i++ {
		torn[i] = 0
	}
	if err := os.WriteFile(path, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, "ns")
	if err != nil {
		t.Fatalf("a torn last write refused the start: %v", err)
	}
	defer s.Close()
	for i := 0; i < 10; i++ {
		if v, err := s.Get(ctx, fmt.Sprintf("k%03d", i)); err != nil || string(v) != want(i) {
			t.Fatalf("acknowledged k%03d: %q %v", i, v, err)
		}
	}
	if _, err := s.Get(ctx, "y"); err == nil {
		t.Fatal("the damaged frame of the torn write survived")
	}
	if s.d.size < before {
		t.Fatalf("cut into acknowledged data: %d < %d", s.d.size, before)
	}
}

// Stray compaction files of a crashed process are removed at open.
func TestStrayCompactionFileIsRemovedAtOpen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tuft.db")
	populate(t, path, 3)
	if err := os.WriteFile(path+".compact", []byte("half a compaction"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, "ns")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatalf("stray compaction file: %v", err)
	}
}
