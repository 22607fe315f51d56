package logstore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// killedStore writes ten keys and then "last" in a group of its own, acknowledged, and
// returns the file as a SIGKILL right after would leave it (no closing mark) and the
// offset of last's frame.
func killedStore(t *testing.T, path string) ([]byte, int64) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(path, "ns")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := s.Set(ctx, fmt.Sprintf("k%03d", i), []byte(want(i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Set(ctx, "last", bytes.Repeat([]byte("L"), 200), 0); err != nil {
		t.Fatal(err)
	}
	s.d.mu.RLock()
	valOff := s.d.index["ns\x00last"].off
	s.d.mu.RUnlock()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// The frame starts at its header, the record count and last's record header and key.
	frameOff := valOff - int64(frameHeader+4+13+len("ns\x00last")+4)
	return b, frameOff
}

// Finding 9 of issue 22: a bit flip in the last, acknowledged group of a SIGKILLed store
// was cut off with one WARN, nowhere kept, and `tuft store check` exited 0. Now the store
// still opens on the intact prefix, the cut bytes are kept beside the file, and Check
// reports them as written in full (suspect), naming the offset and the key.
func TestBitFlipInTheLastGroupIsKeptAsideAndReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tuft.db")
	b, off := killedStore(t, path)
	bad := bytes.Clone(b)
	bad[len(bad)-20] ^= 0x04 // in last's value
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, "ns")
	if err != nil {
		t.Fatalf("the intact prefix did not open: %v", err)
	}
	for i := 0; i < 10; i++ {
		if v, err := s.Get(ctx, fmt.Sprintf("k%03d", i)); err != nil || string(v) != want(i) {
			t.Fatalf("k%03d: %q %v", i, v, err)
		}
	}
	if _, err := s.Get(ctx, "last"); err == nil {
		t.Fatal("the damaged frame was served")
	}
	s.Close()
	kept, _ := filepath.Glob(path + ".damaged-*")
	if len(kept) != 1 {
		t.Fatalf("the cut-off end was not kept aside: %v", kept)
	}
	got, _ := os.ReadFile(kept[0])
	if !bytes.Equal(got, bad[off:]) {
		t.Fatalf("kept %d bytes, want the %d from offset %d", len(got), len(bad)-int(off), off)
	}
	rep, err := Check(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.CutTails) != 1 || !rep.Suspect() || rep.Corrupt() {
		t.Fatalf("Check: %+v", rep)
	}
	c := rep.CutTails[0]
	if c.Offset != off || c.Bytes != int64(len(bad))-off || c.Torn || !slices.Contains(c.Keys, "ns/last") {
		t.Fatalf("cut tail reported as %+v (want offset %d, %d bytes, not torn, naming ns/last)", c, off, len(bad)-int(off))
	}
}

// An honest torn last write (the file ends inside a frame) is cut off too, kept aside,
// and reported as an unfinished write, not as suspect.
func TestTornLastWriteIsKeptAsideAsUnfinished(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tuft.db")
	b, off := killedStore(t, path)
	if err := os.WriteFile(path, b[:len(b)-30], 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, "ns")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	rep, err := Check(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.CutTails) != 1 || rep.Suspect() || !rep.CutTails[0].Torn || rep.CutTails[0].Offset != off {
		t.Fatalf("Check: %+v", rep.CutTails)
	}
}

// A flipped bit in the closing mark of a cleanly closed store holds no write: cut and
// kept like any tail, it is not reported as suspect.
func TestBitFlipInTheClosingMarkIsNotSuspect(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tuft.db")
	b, _ := populate(t, path, 5)
	b[len(b)-3] ^= 1
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if rep, err := Check(path); err != nil || rep.Suspect() || len(rep.Damage) != 1 || !rep.Damage[0].TornTail {
		t.Fatalf("Check before the open: %+v %v", rep, err)
	}
	s, err := Open(path, "ns")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	rep, err := Check(path)
	if err != nil || rep.Suspect() || len(rep.CutTails) != 1 || rep.CutTails[0].Bytes != markLen {
		t.Fatalf("Check after the open: %+v %v", rep, err)
	}
}
