//go:build unix

package engine

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// savePoints are the places inside SaveAdapter's write protocol where a crash can fall:
// after each step that changes the file system.
var savePoints = []string{"tmp-written", "old-removed", "old-renamed", "new-renamed", "done"}

// TestSaveAdapterCrashHelper is the child process of TestSaveAdapterSurvivesSIGKILL: it
// saves generation 2 of an adapter over generation 1 and kills itself with SIGKILL at
// the point named by TUFT_CRASH_AT.
func TestSaveAdapterCrashHelper(t *testing.T) {
	at, dir, preset := os.Getenv("TUFT_CRASH_AT"), os.Getenv("TUFT_CRASH_DIR"), os.Getenv("TUFT_CRASH_PRESET")
	if at == "" {
		t.Skip("the child process of TestSaveAdapterSurvivesSIGKILL")
	}
	m, err := Load(preset, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	a := generation(t, m, 2)
	_ = m.saveAdapter(a, dir, true, func(p string) {
		if p == at {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	})
	t.Fatal("not killed")
}

// generation returns an adapter whose weights are all g, recognisable after a reload.
func generation(t testing.TB, m *Model, g float32) *Adapter {
	a, err := m.NewAdapter(LoraConfig{Rank: 2, Alpha: 2, Seed: 1, TrainAttn: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range a.W.pairs() {
		for i := range p.A {
			p.A[i] = g
		}
		for i := range p.B {
			p.B[i] = g
		}
	}
	a.Step = int64(g)
	return a
}

// A SIGKILL anywhere inside SaveAdapter leaves a directory that loads as one whole
// generation, the old or the new, never nothing (the run would start over from a fresh
// adapter); no temporary directory survives the next save.
func TestSaveAdapterSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	preset := filepath.Join(t.TempDir(), "tiny")
	if err := WritePreset("tiny", preset); err != nil {
		t.Fatal(err)
	}
	m, err := Load(preset, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range savePoints {
		t.Run(at, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "_autosave")
			if err := m.SaveAdapter(generation(t, m, 1), dir, true); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestSaveAdapterCrashHelper$")
			cmd.Env = append(os.Environ(), "TUFT_CRASH_AT="+at, "TUFT_CRASH_DIR="+dir, "TUFT_CRASH_PRESET="+preset)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the child was not killed at %s: %v\n%s", at, err, out.String())
			}
			b, err := m.LoadAdapter(dir, true)
			if err != nil {
				t.Fatalf("after a crash at %s: %v", at, err)
			}
			g := b.W.pairs()[0].A[0]
			if (g != 1 && g != 2) || b.Step != int64(g) {
				t.Fatalf("after a crash at %s: generation %v, step %d", at, g, b.Step)
			}
			if at == "done" && g != 2 {
				t.Fatalf("a finished save was lost")
			}
			// The next save completes and leaves nothing behind.
			if err := m.SaveAdapter(generation(t, m, 3), dir, true); err != nil {
				t.Fatal(err)
			}
			ents, _ := os.ReadDir(root)
			for _, e := range ents {
				if e.Name() != "_autosave" {
					t.Fatalf("left behind: %s", e.Name())
				}
			}
			if b, err := m.LoadAdapter(dir, true); err != nil || b.W.pairs()[0].A[0] != 3 {
				t.Fatalf("the save after the crash: %v", err)
			}
		})
	}
	_ = strings.Contains
	_ = context.Background
}
