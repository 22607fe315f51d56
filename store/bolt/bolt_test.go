package bolt_test

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/store/bolt"
	"github.com/tuft-go/tuft/store/storetest"
)

func TestConformance(t *testing.T) {
	var mu sync.Mutex
	files := map[string]string{}
	storetest.Run(t, func(t *testing.T, ns string) store.Store {
		mu.Lock()
		path, ok := files[t.Name()]
		if !ok {
			path = filepath.Join(t.TempDir(), "tuft.db")
			files[t.Name()] = path
		}
		mu.Unlock()
		s, err := bolt.Open(path, ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return store.Instrument(s)
	})
}

func TestLockedFileGetsAClearError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	other, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := bolt.Open(path, "n"); err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("open of a locked file: %v", err)
	}
}

func TestCorruptFileIsNamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.db")
	if err := writeFile(path, []byte(strings.Repeat("not a database ", 500))); err != nil {
		t.Fatal(err)
	}
	if _, err := bolt.Open(path, "n"); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("corrupt file: %v", err)
	}
}
