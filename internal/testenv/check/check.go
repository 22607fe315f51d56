package check

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// update is the -update flag of every test binary that imports check: rewrite the golden
// files from the current code instead of comparing against them.
var update = flag.Bool("update", false, "rewrite the golden files from the current code (review the diff)")

// Update reports whether the test runs with -update, for a comparison Golden does not
// make (protobuf messages compared message for message, say): write with WriteGolden.
func Update() bool { return *update }

// Golden compares got with the golden file at path byte for byte and reports whether they
// are equal. Under -update it writes got to path (creating its folder) and reports true.
// A missing golden is fatal; a difference is an error that shows both.
func Golden(t testing.TB, path string, got []byte) bool {
	t.Helper()
	if *update {
		WriteGolden(t, path, got)
		return true
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (review, then rerun with -update):\n--- got\n%s\n--- want\n%s", path, got, want)
		return false
	}
	return true
}

// WriteGolden writes b to the golden file at path, creating its folder.
func WriteGolden(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// NoStaleGoldens fails for each file in dir whose name built reports was not produced by
// this run: a golden nothing builds any more vouches for output the code no longer gives.
// It does nothing under -update (which only writes).
func NoStaleGoldens(t testing.TB, dir string, built func(name string) bool) {
	t.Helper()
	if *update {
		return
	}
	files, _ := os.ReadDir(dir)
	for _, f := range files {
		if !built(f.Name()) {
			t.Errorf("%s: nothing builds this golden any more; delete it", filepath.Join(dir, f.Name()))
		}
	}
}

// Eventually polls cond every 20 ms until it holds, failing the test (naming
// what it waited for) when it does not within d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
