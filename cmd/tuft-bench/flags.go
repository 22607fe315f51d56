package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// flags is one subcommand's flag set with the usage text --help prints. cmd/tuft has its
// own command table and flag kit; this one is the few lines three subcommands need.
type flags struct {
	*flag.FlagSet
	synopsis, summary string
}

func newFlags(name, synopsis, summary string) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints errors and usage once, to the right stream
	fs.Usage = func() {}
	return &flags{FlagSet: fs, synopsis: synopsis, summary: summary}
}

func (f *flags) usage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s\n\n%s\n\nflags:\n", f.synopsis, f.summary)
	f.SetOutput(&b)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
	return b.String()
}

// parse parses args: a help flag (also among the positional arguments) gives a
// helpRequest, a bad flag a usageError.
func (f *flags) parse(args []string) error {
	err := f.Parse(args)
	if errors.Is(err, flag.ErrHelp) || slices.ContainsFunc(f.Args(), isHelp) {
		return &helpRequest{f.usage()}
	}
	if err != nil {
		return &usageError{err: err, usage: f.usage()}
	}
	return nil
}

// args checks the number of positional arguments is between n and max.
func (f *flags) args(n, max int) error {
	if got := f.NArg(); got < n || got > max {
		return &usageError{err: fmt.Errorf("got %d argument(s), want %d to %d", got, n, max), usage: f.usage()}
	}
	return nil
}

func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

// helpRequest is the answer to -h/--help: the usage on stdout, exit status 0.
type helpRequest struct{ text string }

func (h *helpRequest) Error() string { return "help requested" }

// usageError is a wrong invocation: the error and the usage on stderr, exit status 2.
type usageError struct {
	err   error
	usage string
}

func (u *usageError) Error() string { return u.err.Error() }
func (u *usageError) Unwrap() error { return u.err }

// verb splits the arguments into the subcommand, one of verbs, and the rest.
func verb(args []string, verbs ...string) (string, []string, error) {
	if len(args) == 0 || !slices.Contains(verbs, args[0]) {
		return "", nil, &usageError{err: fmt.Errorf("want a subcommand: %s", strings.Join(verbs, ", "))}
	}
	return args[0], args[1:], nil
}
