package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Every command and subcommand parses its arguments through flags.parse, so -h or
// --help anywhere prints its usage to stdout and exits 0, and a bad flag or argument
// prints the error and the usage to stderr and exits 2 (see run in main.go).

// flags is one command's flag set with the usage text --help prints.
type flags struct {
	*flag.FlagSet
	synopsis string // the usage line(s), after "usage: "
	summary  string
}

// newFlags returns the flag set of the command whose usage line is synopsis.
func newFlags(name, synopsis, summary string) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// The flag package would print errors and usage itself (to stderr, also for --help);
	// run prints them once, to the right stream.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flags{FlagSet: fs, synopsis: synopsis, summary: summary}
}

// usage is the text --help prints: the usage line, the summary and the flags.
func (f *flags) usage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s\n", f.synopsis)
	if f.summary != "" {
		fmt.Fprintf(&b, "\n%s\n", f.summary)
	}
	n := 0
	f.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		b.WriteString("\nflags:\n")
		f.SetOutput(&b)
		f.PrintDefaults()
		f.SetOutput(io.Discard)
	}
	return b.String()
}

// parse parses args. A help flag (also among the positional arguments) gives a
// helpRequest, a bad flag a usageError; both carry the usage text.
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

// args checks the number of positional arguments: exactly n, or between n and max.
func (f *flags) args(n, max int) error {
	if got := f.NArg(); got < n || got > max {
		return &usageError{err: fmt.Errorf("got %d argument(s), want %s", got, count(n, max)), usage: f.usage()}
	}
	return nil
}

func count(n, max int) string {
	if n == max {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d to %d", n, max)
}

func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

// helpRequest is the answer to -h/--help: the usage, printed to stdout, exit status 0.
type helpRequest struct{ text string }

func (h *helpRequest) Error() string { return "help requested" }

// usageError is a wrong invocation: the error and the usage go to stderr, exit status 2.
// An empty usage means the command's own (from the command table).
type usageError struct {
	err   error
	usage string
}

func (u *usageError) Error() string { return u.err.Error() }
func (u *usageError) Unwrap() error { return u.err }

// verb splits a command's arguments into its subcommand and the rest, checking the
// subcommand is one of verbs.
func verb(args []string, verbs ...string) (string, []string, error) {
	if len(args) == 0 {
		return "", nil, &usageError{err: fmt.Errorf("a subcommand is required (%s)", strings.Join(verbs, ", "))}
	}
	if !slices.Contains(verbs, args[0]) {
		return "", nil, &usageError{err: fmt.Errorf("unknown subcommand %q (have %s)", args[0], strings.Join(verbs, ", "))}
	}
	return args[0], args[1:], nil
}
