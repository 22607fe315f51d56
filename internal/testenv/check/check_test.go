package check

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// recorder is a testing.TB that records failures instead of failing: Fatalf stops the
// goroutine as the real one does.
type recorder struct {
	testing.TB
	errs, fatals []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }
func (r *recorder) Fatalf(f string, a ...any) {
	r.fatals = append(r.fatals, fmt.Sprintf(f, a...))
	runtime.Goexit()
}
func (r *recorder) Fatal(a ...any) { r.Fatalf("%s", fmt.Sprint(a...)) }

// run calls f with r in its own goroutine, so that a Fatalf ends only f.
func (r *recorder) run(f func()) {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	<-done
}

func TestGolden(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sub", "a.json")
	r := &recorder{TB: t}
	r.run(func() { Golden(r, path, []byte("x")) })
	if len(r.fatals) != 1 {
		t.Fatalf("a missing golden is not fatal: %+v", r)
	}
	WriteGolden(t, path, []byte("x\n"))
	r = &recorder{TB: t}
	var ok bool
	r.run(func() { ok = Golden(r, path, []byte("x\n")) })
	if !ok || len(r.errs)+len(r.fatals) != 0 {
		t.Fatalf("equal bytes fail: %+v", r)
	}
	r.run(func() { ok = Golden(r, path, []byte("y\n")) })
	if ok || len(r.errs) != 1 {
		t.Fatalf("a difference passes: ok %v %+v", ok, r)
	}
}

func TestNoStaleGoldens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, n := range []string{"a.pb", "b.pb"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &recorder{TB: t}
	NoStaleGoldens(r, dir, func(name string) bool { return name == "a.pb" })
	if len(r.errs) != 1 {
		t.Fatalf("want one stale golden (b.pb), got %q", r.errs)
	}
}

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, time.Second, "three polls", func() bool { n++; return n == 3 })
	r := &recorder{TB: t}
	r.run(func() { Eventually(r, 50*time.Millisecond, "never", func() bool { return false }) })
	if len(r.fatals) != 1 {
		t.Fatalf("a condition that never holds does not fail: %+v", r)
	}
}
