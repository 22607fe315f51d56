package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/internal/cli"
)

// verb splits the arguments into the subcommand, one of verbs, and the rest (the flag
// kit is internal/cli, shared with cmd/tuft).
func verb(args []string, verbs ...string) (string, []string, error) {
	if len(args) == 0 || !slices.Contains(verbs, args[0]) {
		return "", nil, &cli.UsageError{Err: fmt.Errorf("want a subcommand: %s", strings.Join(verbs, ", "))}
	}
	return args[0], args[1:], nil
}

// modelFlags are --preset and --model, the model of the engine and sampling benchmarks.
type modelFlags struct {
	preset, modelDir string
}

func (m *modelFlags) register(fs *cli.Flags) {
	fs.StringVar(&m.preset, "preset", "smollm2-135m-shape", "model preset ("+strings.Join(engine.Presets(), ", ")+"), written to a temporary directory")
	fs.StringVar(&m.modelDir, "model", "", "use this model directory (HuggingFace layout) instead of a preset")
}

// open is the model's directory (the preset written to a temporary one, removed by
// cleanup) and the preset's name for the report ("" with --model).
func (m modelFlags) open(logf func(string, ...any)) (dir, preset string, cleanup func(), err error) {
	if dir, cleanup, err = benchModel(m.modelDir, m.preset, logf); err != nil {
		return "", "", nil, err
	}
	if m.modelDir == "" {
		preset = m.preset
	}
	return dir, preset, cleanup, nil
}

// torchFlags are --torch, --python and --torch-script, the PyTorch reference's.
type torchFlags struct {
	torch, python, script string
}

// register adds the flags; scriptDefault says which script --torch-script defaults to.
func (t *torchFlags) register(fs *cli.Flags, scriptDefault string) {
	fs.StringVar(&t.torch, "torch", "auto", "PyTorch reference: auto (when python3 can import torch), on (required), off")
	fs.StringVar(&t.python, "python", "", "Python interpreter for the reference (default: python3 on PATH, then /usr/bin/python3)")
	fs.StringVar(&t.script, "torch-script", "", "path of the reference script (default: "+scriptDefault+", found from the working directory)")
}

// checkMode refuses a --torch other than auto, on or off.
func (t torchFlags) checkMode() error {
	if t.torch != "auto" && t.torch != "on" && t.torch != "off" {
		return fmt.Errorf("--torch must be auto, on or off, not %q", t.torch)
	}
	return nil
}

// reference locates the reference with find (given --python and --torch-script; it
// answers the interpreter, the script and why it cannot run). With --torch off, or auto
// and nothing found, python is "" and skipped says why; --torch on and nothing found is
// an error.
func (t torchFlags) reference(find func(python, script string) (string, string, string)) (python, script, skipped string, err error) {
	if t.torch == "off" {
		return "", "", "--torch off", nil
	}
	python, script, why := find(t.python, t.script)
	if why != "" {
		if t.torch == "on" {
			return "", "", "", fmt.Errorf("PyTorch reference unavailable: %s", why)
		}
		return "", script, why, nil
	}
	return python, script, "", nil
}

// progressLog is a benchmark's progress log: "bench: …" lines on stderr.
func progressLog(stderr io.Writer) func(format string, a ...any) {
	return func(format string, a ...any) { fmt.Fprintf(stderr, "bench: "+format+"\n", a...) }
}

// writeReport writes a benchmark's report: indented JSON with --json, else print's table.
func writeReport[R any](stdout io.Writer, jsonOut bool, rep *R, print func(io.Writer, *R)) error {
	if jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	print(stdout, rep)
	return nil
}
