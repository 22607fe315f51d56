package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tuft-go/tuft/internal/cli"
)

// version is set with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

type command struct {
	name     string
	synopsis []string // usage lines
	summary  string
	subs     []string // subcommands, each parsing its own flags ("" for none)
	run      func(args []string) error
}

func commands() []command {
	return []command{
		{"launch", []string{"tuft launch [--config FILE] [--host HOST] [--port PORT] [flags]"},
			"Run the API server (embedded defaults without a config).", nil, cmdLaunch},
		{"worker", []string{"tuft worker [--config FILE] [--listen ADDR] [--advertise ADDR] [--log-level LEVEL]"},
			"Host the config's models for API replicas over gRPC.", nil, cmdWorker},
		{"version", []string{"tuft version"}, "Print the version.", nil, cmdVersion},
		{"config", []string{"tuft config check FILE"}, "Validate a tuft_config.yaml.", []string{"check"}, cmdConfig},
		{"clear", []string{"tuft clear persistence [--config FILE] [-f]"}, "Delete every stored record.", []string{"persistence"}, cmdClear},
		{"store", []string{"tuft store check [--config FILE | --path FILE]", "tuft store repair [--config FILE | --path FILE]"},
			"Find damage in the embedded store; repair keeps every intact record.", []string{"check", "repair"}, cmdStore},
		{"model", []string{"tuft model init --preset NAME --out DIR", "tuft model presets", "tuft model render --model DIR|FILE.gguf [--generation-prompt] < messages.json", "tuft model import --out DIR [--dtype float32|bfloat16] FILE.gguf"},
			"Write a built-in model, list the presets, or render a conversation with a model's chat template.", []string{"init", "presets", "render"}, cmdModel},
		{"key", []string{"tuft key hash KEY", "tuft key new"}, "Hash or generate an API key.", []string{"hash", "new"}, cmdKey},
		{"runs", []string{"tuft runs list [--url URL] [--api-key KEY]", "tuft runs show RUN_ID [--url URL] [--api-key KEY]"},
			"List or show training runs on a server.", []string{"list", "show"}, cmdRuns},
		{"checkpoints", []string{"tuft checkpoints list [RUN_ID]", "tuft checkpoints download PATH [-o FILE]",
			"tuft checkpoints export PATH --format peft|hf|gguf|gguf-lora [--quant f16|bf16|q8_0] [-o OUT] [--model DIR]",
			"tuft checkpoints delete|publish|unpublish PATH"},
			"Manage checkpoints on a server (each takes --url and --api-key), or export a local one.",
			[]string{"list", "download", "export", "delete", "publish", "unpublish"}, cmdCheckpoints},
		{"smoke", []string{"tuft smoke [--config FILE] [--otlp-endpoint URL]"},
			"Send one trace, metric batch and log through the telemetry pipeline; report the export.", nil, cmdSmoke},
	}
}

// usage is the command's help text.
func (c command) usage() string {
	var b strings.Builder
	for i, s := range c.synopsis {
		if i == 0 {
			fmt.Fprintf(&b, "usage: %s\n", s)
		} else {
			fmt.Fprintf(&b, "       %s\n", s)
		}
	}
	fmt.Fprintf(&b, "\n%s\n", c.summary)
	if len(c.subs) > 0 {
		fmt.Fprintf(&b, "\nRun 'tuft %s SUBCOMMAND --help' for a subcommand's flags.\n", c.name)
	}
	return b.String()
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: tuft COMMAND [flags]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'tuft COMMAND --help' for a command's usage.\n")
}

func lookup(name string) (command, bool) {
	if name == "checkpoint" { // the singular reads as naturally: tuft checkpoint export
		name = "checkpoints"
	}
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// run runs the command line args (without the program name) and returns the exit status:
// 0, 1 for a failure, 2 for a wrong invocation. Help goes to stdout; errors to stderr.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	switch {
	case name == "help" && len(args) > 1:
		c, ok := lookup(args[1])
		if !ok {
			fmt.Fprintf(stderr, "tuft: unknown command %q\n", args[1])
			return 2
		}
		fmt.Fprint(stdout, c.usage())
		return 0
	case name == "help" || cli.IsHelp(name):
		usage(stdout)
		return 0
	case name == "--version" || name == "-v":
		name = "version"
	}
	c, ok := lookup(name)
	if !ok && name == "bench" {
		// The benchmarks left the product binary; say where they went rather than list
		// the commands.
		fmt.Fprintln(stderr, "tuft: the benchmarks are their own binary now: go run ./cmd/tuft-bench engine|sampling|load [flags]")
		return 2
	}
	if !ok {
		fmt.Fprintf(stderr, "tuft: unknown command %q\n\n", name)
		usage(stderr)
		return 2
	}
	if len(c.subs) > 0 && len(args) > 1 && cli.IsHelp(args[1]) {
		fmt.Fprint(stdout, c.usage())
		return 0
	}
	err := c.run(args[1:])
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
			text = c.usage()
		}
		fmt.Fprintf(stderr, "tuft %s: %v\n\n%s", name, bad.Err, text)
		return 2
	}
	fmt.Fprintln(stderr, "tuft "+name+":", err)
	return 1
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func cmdVersion(args []string) error {
	f := cli.NewFlags("version", "tuft version", "Print the version.")
	if err := f.ParseArgs(args); err != nil {
		return err
	}
	if err := f.CheckArgs(0, 0); err != nil {
		return err
	}
	fmt.Println("tuft", version)
	return nil
}
