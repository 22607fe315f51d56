package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tuft-go/tuft/internal/cli"
)

// Every command and subcommand parses its arguments through cli.Flags.ParseArgs, so -h
// or --help anywhere prints its usage to stdout and exits 0, and a bad flag or argument
// prints the error and the usage to stderr and exits 2 (see run in main.go).

// verb splits a command's arguments into its subcommand and the rest, checking the
// subcommand is one of verbs.
func verb(args []string, verbs ...string) (string, []string, error) {
	if len(args) == 0 {
		return "", nil, &cli.UsageError{Err: fmt.Errorf("a subcommand is required (%s)", strings.Join(verbs, ", "))}
	}
	if !slices.Contains(verbs, args[0]) {
		return "", nil, &cli.UsageError{Err: fmt.Errorf("unknown subcommand %q (have %s)", args[0], strings.Join(verbs, ", "))}
	}
	return args[0], args[1:], nil
}
