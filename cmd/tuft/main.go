// Command tuft is TuFT in Go: a multi-tenant LoRA fine-tuning and sampling service that
// speaks the Tinker API. `tuft launch` runs the server; the other subcommands manage
// models, configuration, persistence and telemetry checks.
package main

import (
	"fmt"
	"os"
)

// version is set with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

type command struct {
	name    string
	summary string
	run     func(args []string) error
}

func commands() []command {
	return []command{
		{"launch", "run the server (embedded defaults without a config)", cmdLaunch},
		{"worker", "worker --config FILE [--listen ADDR]: host models for API replicas over gRPC", cmdWorker},
		{"version", "print the version", func([]string) error { fmt.Println("tuft", version); return nil }},
		{"config", "config check FILE: validate a tuft_config.yaml", cmdConfig},
		{"clear", "clear persistence [--config FILE] [-f]: delete every stored record", cmdClear},
		{"store", "store check|repair [--config FILE | --path FILE]: find damage in the embedded store; keep every intact record", cmdStore},
		{"model", "model init --preset NAME --out DIR: write a built-in model; model presets", cmdModel},
		{"key", "key hash KEY | key new: manage API keys", cmdKey},
		{"runs", "runs list | runs show RUN_ID: training runs (--url, --api-key)", cmdRuns},
		{"checkpoints", "checkpoints list [RUN] | download PATH [-o F] | delete | publish | unpublish PATH", cmdCheckpoints},
		{"smoke", "smoke [--config FILE] [--otlp-endpoint URL]: send one trace, metric batch and log; report export", cmdSmoke},
		{"bench", "bench engine [--preset NAME] [--tokens N] [--torch auto|off] [--json]: training/sampling speed and memory vs PyTorch", cmdBench},
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: tuft COMMAND [flags]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", c.name, c.summary)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "-h" || name == "--help" || name == "help" {
		usage()
		return
	}
	if name == "--version" || name == "-v" {
		name = "version"
	}
	for _, c := range commands() {
		if c.name == name {
			if err := c.run(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "tuft "+name+":", err)
				os.Exit(1)
			}
			return
		}
	}
	fmt.Fprintf(os.Stderr, "tuft: unknown command %q\n", name)
	usage()
	os.Exit(2)
}
