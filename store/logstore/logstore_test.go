package logstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/store/logstore"
	"github.com/tuft-go/tuft/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	files := map[string]string{}
	clock := storetest.NewClock()
	storetest.Run(t, func(t *testing.T, ns string) store.Store {
		mu.Lock()
		path, ok := files[t.Name()]
		if !ok {
			path = filepath.Join(t.TempDir(), "tuft.db")
			files[t.Name()] = path
		}
		mu.Unlock()
		s, err := logstore.Open(path, ns, logstore.WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return store.Instrument(s)
	}, storetest.WithClock(clock))
}

func open(t *testing.T, path, ns string) *logstore.Store {
	t.Helper()
	s, err := logstore.Open(path, ns)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Every acknowledged write survives a reopen; an unfinished write at the end of the file
// (a crash in the middle of a group) is cut off, whatever byte it stopped at, and the
// store opens with everything acknowledged before it.
func TestTornTailIsCutAndAcknowledgedWritesSurvive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "tuft.db")
	s := open(t, path, "ns")
	for i := 0; i < 50; i++ {
		if err := s.Set(ctx, fmt.Sprintf("k%03d", i), []byte(strings.Repeat("v", i+1)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Apply(ctx, []store.Op{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}, {Key: "k000"}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	good, _ := os.ReadFile(path)
	// A later write that the crash interrupted: the frame of one more Apply (with the
	// marks before it), cut short. The file is read before the close, whose mark a crash
	// would not have written.
	s = open(t, path, "ns")
	s.Apply(ctx, []store.Op{{Key: "c", Value: []byte("3")}, {Key: "d", Value: []byte("4")}})
	full, _ := os.ReadFile(path)
	s.Close()
	frame := full[len(good):]
	for cut := 0; cut < len(frame); cut++ {
		os.WriteFile(path, append(append([]byte(nil), good...), frame[:cut]...), 0o600)
		s := open(t, path, "ns")
		if v, err := s.Get(ctx, "k049"); err != nil || len(v) != 50 {
			t.Fatalf("cut at %d: acknowledged write lost: %q %v", cut, v, err)
		}
		if _, err := s.Get(ctx, "k000"); err == nil {
			t.Fatalf("cut at %d: a deleted key came back", cut)
		}
		_, errC := s.Get(ctx, "c")
		_, errD := s.Get(ctx, "d")
		if errC == nil || errD == nil {
			t.Fatalf("cut at %d: half of an unfinished Apply survived", cut)
		}
		// The store is writable after the cut and the write lands cleanly.
		if err := s.Set(ctx, "after", []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		s.Close()
		s = open(t, path, "ns")
		if v, err := s.Get(ctx, "after"); err != nil || string(v) != "x" {
			t.Fatalf("cut at %d: write after recovery: %q %v", cut, v, err)
		}
		s.Close()
	}
}

func TestCorruptionBeforeMuchDataIsAnErrorNotATruncation(t *testing.T) {
	t.Parallel()
	// Corruption in the middle of a file is not a torn tail: the store refuses to open
	// rather than silently dropping what follows (here: the header).
	path := filepath.Join(t.TempDir(), "bad.db")
	os.WriteFile(path, []byte(strings.Repeat("not a database ", 500)), 0o600)
	if _, err := logstore.Open(path, "n"); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("corrupt file: %v", err)
	}
}

func TestLockedFileGetsAClearError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	// Another process holds the file: simulate with a child that opens it and waits.
	if os.Getenv("LOGSTORE_HOLD") != "" {
		s := open(t, os.Getenv("LOGSTORE_HOLD"), "n")
		defer s.Close()
		os.Stdout.WriteString("held\n")
		var b [1]byte
		os.Stdin.Read(b[:])
		return
	}
	cmd := helperProcess(t, path)
	defer cmd()
	if _, err := logstore.Open(path, "n"); err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("open of a locked file: %v", err)
	}
}

// Writes from many goroutines share commits and all land.
func TestConcurrentWritersAllLand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	s := open(t, path, "ns")
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if err := s.Set(ctx, fmt.Sprintf("g%02d/%03d", g, i), []byte{byte(i)}, 0); err != nil {
					t.Error(err)
				}
			}
		}(g)
	}
	wg.Wait()
	s.Close()
	s = open(t, path, "ns")
	defer s.Close()
	n := 0
	s.Scan(ctx, "g", func(string, []byte) error { n++; return nil })
	if n != 1600 {
		t.Fatalf("%d keys after reopen, want 1600", n)
	}
}
