// Command tuft-bench measures the engine on this machine: `tuft-bench engine` (LoRA
// training and sampling speed and peak memory against the PyTorch reference in
// tools/torchref, or with --reference llama.cpp inference against llama.cpp on the same
// GGUF file, tools/llamacppref; both read against the machine's measured memory bandwidth
// and GEMM peak), `tuft-bench sampling` (the continuous-batching scheduler) and
// `tuft-bench load` (loading a model directory). It is its own binary so that the product,
// cmd/tuft, carries no benchmark code, no Python subprocesses and no reference finding:
//
//	go run ./cmd/tuft-bench engine --preset tiny --json
//	go build -tags cuda -o tuft-bench ./cmd/tuft-bench   # for --device cuda
//
// Every subcommand answers -h/--help with its usage (exit status 0); a wrong invocation
// prints the error and the usage (exit status 2); a failed measurement exits 1.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/internal/cli"
)

const usageText = `usage: tuft-bench engine [--preset NAME | --model DIR] [--device cpu|cuda[:N]] [--tokens N] [--torch auto|on|off] [--json] [flags]
       tuft-bench engine --reference llama.cpp [--model FILE.gguf] [--weights f32|bf16|q8_0|q4_1|q4_k] [--tuft-weights F] [--json] [flags]
       tuft-bench sampling [--preset NAME | --model DIR] [--requests N] [--adapters M] [--tenants T] [--torch auto|on|off] [--json] [flags]
       tuft-bench load --model DIR [--device cpu|cuda[:N]] [--json]

Measure training and sampling speed and memory against PyTorch, inference against llama.cpp
(each also as a fraction of the machine's memory bandwidth and GEMM peak), the
continuous-batching scheduler, and loading a model.

Run 'tuft-bench SUBCOMMAND --help' for a subcommand's flags.
`

// writePresetVerb is the child that writes a preset for engine and sampling (see
// benchWritePreset), so that generating the weights does not count towards the measuring
// process's peak RSS. It is not listed: it is this binary talking to itself.
const writePresetVerb = "write-preset"

// run runs the command line args (without the program name) and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return 2
	}
	if cli.IsHelp(args[0]) || args[0] == "help" {
		fmt.Fprint(stdout, usageText)
		return 0
	}
	var err error
	if args[0] == writePresetVerb {
		if len(args) != 3 {
			err = &cli.UsageError{Err: fmt.Errorf("want %s PRESET DIR", writePresetVerb), Usage: usageText}
		} else {
			err = engine.WritePreset(args[1], args[2])
		}
	} else {
		err = runBench(args, stdout, stderr)
	}
	var help *cli.HelpRequest
	var bad *cli.UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.Text)
		return 0
	case errors.As(err, &bad):
		text := bad.Usage
		if text == "" {
			text = usageText
		}
		fmt.Fprintf(stderr, "tuft-bench: %v\n\n%s", bad.Err, text)
		return 2
	}
	fmt.Fprintln(stderr, "tuft-bench:", err)
	return 1
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
