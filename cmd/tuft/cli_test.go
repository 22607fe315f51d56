package main

import (
	"bytes"
	"strings"
	"testing"
)

// Every command and subcommand answers -h and --help with its usage on stdout and exit
// status 0; the table is the command table itself, so a new command is covered.
func TestEveryCommandHasHelp(t *testing.T) {
	cases := [][]string{{"--help"}, {"-h"}, {"help"}}
	for _, c := range commands() {
		cases = append(cases, []string{c.name, "--help"}, []string{c.name, "-h"}, []string{"help", c.name})
		for _, sub := range c.subs {
			cases = append(cases, []string{c.name, sub, "--help"}, []string{c.name, sub, "-h"})
		}
	}
	// Help among positional arguments, and after other flags.
	cases = append(cases, []string{"config", "check", "tuft_config.yaml", "--help"}, []string{"runs", "show", "run-1", "-h"},
		[]string{"worker", "--listen", "127.0.0.1:0", "--help"})
	for _, args := range cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(args, &out, &errOut); code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", code, errOut.String())
			}
			if !strings.HasPrefix(out.String(), "usage: tuft") || errOut.Len() != 0 {
				t.Fatalf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
			}
			// A subcommand's help names the subcommand and lists its flags.
			if len(args) == 3 && args[0] != "help" && args[1] != "--help" {
				if !strings.Contains(out.String(), "tuft "+args[0]+" "+args[1]) {
					t.Fatalf("the help of %q does not show its usage line:\n%s", args, out.String())
				}
			}
		})
	}
	var out bytes.Buffer
	run([]string{"worker", "--help"}, &out, &bytes.Buffer{})
	for _, flag := range []string{"-config", "-listen", "-advertise", "-log-level"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("tuft worker --help does not list %s:\n%s", flag, out.String())
		}
	}
}

// A wrong invocation names the problem and shows the usage on stderr, exit status 2.
func TestWrongInvocationsAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: tuft COMMAND"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"worker", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"model"}, "a subcommand is required"},
		{[]string{"model", "frob"}, `unknown subcommand "frob"`},
		{[]string{"runs", "show"}, "got 0 argument(s), want 1"},
		{[]string{"key", "hash"}, "got 0 argument(s), want 1"},
		{[]string{"version", "extra"}, "got 1 argument(s), want 0"},
		{[]string{"model", "init"}, "--out is required"},
		{[]string{"model", "import"}, "got 0 argument(s), want 1"},
		{[]string{"model", "import", "m.gguf"}, "--out is required"},
		{[]string{"model", "import", "--out", "d", "--dtype", "int4", "m.gguf"}, `--dtype "int4" must be float32 or bfloat16`},
		{[]string{"model", "import", "--out", "d", "model.safetensors"}, "is not a .gguf file"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(tc.args, &out, &errOut); code != 2 {
				t.Fatalf("exit status %d, want 2; stdout %q stderr %q", code, out.String(), errOut.String())
			}
			if !strings.Contains(errOut.String(), tc.want) || !strings.Contains(errOut.String(), "usage: tuft") || out.Len() != 0 {
				t.Fatalf("stderr %q, want %q and the usage; stdout %q", errOut.String(), tc.want, out.String())
			}
		})
	}
}

// `tuft bench` is gone from the product binary: the answer says where the benchmarks went.
func TestBenchPointsToItsOwnBinary(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"bench", "engine"}, &out, &errOut); code != 2 {
		t.Fatalf("exit status %d, want 2", code)
	}
	if !strings.Contains(errOut.String(), "go run ./cmd/tuft-bench") || out.Len() != 0 {
		t.Fatalf("stderr %q, want a pointer to cmd/tuft-bench; stdout %q", errOut.String(), out.String())
	}
}
