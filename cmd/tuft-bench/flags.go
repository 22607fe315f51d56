package main

import (
	"fmt"
	"slices"
	"strings"

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
