package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRef writes a stand-in for bench.py --paced (plain Python, no torch): it speaks the
// protocol, or breaks it where body says.
func fakeRef(t *testing.T, body string) (python, script string) {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	script = filepath.Join(t.TempDir(), "ref.py")
	src := "import json, sys\nsay = lambda o: print(json.dumps(o), flush=True)\n" + body
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return python, script
}

// A reference that follows the protocol runs each step when asked, in order, and its
// report comes back after "sample".
func TestPacedReferenceSteps(t *testing.T) {
	python, script := fakeRef(t, `
say({"ready": True})
steps = []
for i in range(3):
    assert sys.stdin.readline().strip() == "step"
    steps.append(i)
    say({"step": i, "seconds": 0.5})
assert sys.stdin.readline().strip() == "sample"
say({"impl": "fake", "train": {"step_s": [0.5, 0.5], "tokens_per_s": 7}, "threads": len(steps)})
`)
	p, err := startPacedRef(python, []string{script, "--paced"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		p.step(i)
	}
	var s benchSide
	if _, err := p.result(&s); err != nil {
		t.Fatal(err)
	}
	if s.Impl != "fake" || s.Threads != 3 || s.Train.TokensPerS != 7 {
		t.Fatalf("report %+v", s)
	}
}

// A reference that dies, or answers another step than asked, is an error naming the step;
// the steps after it are not asked for (the engine's run goes on).
func TestPacedReferenceFailures(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"dies", `
say({"ready": True})
sys.stdin.readline(); say({"step": 0, "seconds": 1})
sys.exit(3)
`, "step 1"},
		{"wrong step", `
say({"ready": True})
sys.stdin.readline(); say({"step": 0, "seconds": 1})
sys.stdin.readline(); say({"step": 5, "seconds": 1})
sys.stdin.read()
`, "asked for step 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			python, script := fakeRef(t, c.body)
			p, err := startPacedRef(python, []string{script}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 4; i++ {
				p.step(i)
			}
			_, err = p.result(&benchSide{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %q", err, c.want)
			}
		})
	}
	// No ready line: the start fails and the process is gone.
	python, script := fakeRef(t, `say({"something": 1}); sys.stdin.read()`)
	if _, err := startPacedRef(python, []string{script}, io.Discard); err == nil || !strings.Contains(err.Error(), "ready") {
		t.Fatalf("start without a ready line: %v", err)
	}
}

// The engine's loop asks for the reference's steps 0…N once each, in order.
func TestBenchGoTakesTurns(t *testing.T) {
	benchPresetInChild = false
	dir := t.TempDir()
	if err := benchWritePreset("tiny", dir); err != nil {
		t.Fatal(err)
	}
	var got []int
	o := benchOptions{tokens: 16, rank: 4, steps: 3, sampleTokens: 2, batches: []int{1}, device: "cpu", weights: "f32"}
	if _, _, err := benchGo(t.Context(), dir, o, func(string, ...any) {}, func(i int) { got = append(got, i) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0] != 0 || got[1] != 1 || got[2] != 2 || got[3] != 3 {
		t.Fatalf("turns %v, want [0 1 2 3]", got)
	}
}
