package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every subcommand answers --help on stdout with exit status 0; a wrong invocation is
// exit status 2 with the problem and the usage on stderr.
func TestHelpAndWrongInvocations(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"engine", "--help"}, {"sampling", "-h"}, {"load", "--help"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "usage: tuft-bench") || errOut.Len() != 0 {
			t.Fatalf("%q: exit %d\nstdout %q\nstderr %q", args, code, out.String(), errOut.String())
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: tuft-bench"},
		{[]string{"frob"}, "want a subcommand: engine, sampling, load"},
		{[]string{"engine", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"load"}, "--model is required"},
		{[]string{writePresetVerb, "tiny"}, "want write-preset PRESET DIR"},
		{[]string{"engine", "--reference", "vllm"}, `--reference "vllm": want torch or llama.cpp`},
		{[]string{"engine", "--weights", "q2_k"}, `--weights "q2_k": want one of f32, bf16, q8_0, q4_1`},
		{[]string{"engine", "--reference", "llama.cpp", "--batches", "16"}, "--batches must be 1,B"},
		{[]string{"engine", "--threads", "-1"}, "--threads -1"},
	} {
		var out, errOut bytes.Buffer
		if code := run(tc.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) || out.Len() != 0 {
			t.Fatalf("%q: exit %d, want 2 and %q\nstdout %q\nstderr %q", tc.args, code, tc.want, out.String(), errOut.String())
		}
	}
}

// The child that writes a preset outside the measuring process writes a loadable model.
func TestWritePresetChild(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if code := run([]string{writePresetVerb, "tiny", dir}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t.Fatal(err)
	}
}
