// Package cli is the flag kit of the project's commands (tuft, tuft-bench): every
// command and subcommand parses its arguments through Flags.ParseArgs, so -h or --help
// anywhere gives a HelpRequest (usage on stdout, exit status 0) and a bad flag or
// argument a UsageError (the error and the usage on stderr, exit status 2).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Flags is one command's flag set with the usage text --help prints.
type Flags struct {
	*flag.FlagSet
	Synopsis string // the usage line(s), after "usage: "
	Summary  string
}

// NewFlags returns the flag set of the command whose usage line is synopsis.
func NewFlags(name, synopsis, summary string) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// The flag package would print errors and usage itself (to stderr, also for --help);
	// the command prints them once, to the right stream.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &Flags{FlagSet: fs, Synopsis: synopsis, Summary: summary}
}

// UsageText is the text --help prints: the usage line, the summary and the flags.
func (f *Flags) UsageText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s\n", f.Synopsis)
	if f.Summary != "" {
		fmt.Fprintf(&b, "\n%s\n", f.Summary)
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

// ParseArgs parses args. A help flag (also among the positional arguments) gives a
// HelpRequest, a bad flag a UsageError; both carry the usage text.
func (f *Flags) ParseArgs(args []string) error {
	err := f.Parse(args)
	if errors.Is(err, flag.ErrHelp) || slices.ContainsFunc(f.Args(), IsHelp) {
		return &HelpRequest{f.UsageText()}
	}
	if err != nil {
		return &UsageError{Err: err, Usage: f.UsageText()}
	}
	return nil
}

// CheckArgs checks the number of positional arguments: exactly n, or between n and max.
func (f *Flags) CheckArgs(n, max int) error {
	if got := f.NArg(); got < n || got > max {
		return &UsageError{Err: fmt.Errorf("got %d argument(s), want %s", got, count(n, max)), Usage: f.UsageText()}
	}
	return nil
}

func count(n, max int) string {
	if n == max {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d to %d", n, max)
}

// IsHelp reports whether a is a help flag.
func IsHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

// HelpRequest is the answer to -h/--help: the usage, printed to stdout, exit status 0.
type HelpRequest struct{ Text string }

func (h *HelpRequest) Error() string { return "help requested" }

// UsageError is a wrong invocation: the error and the usage go to stderr, exit status 2.
// An empty Usage means the command's own.
type UsageError struct {
	Err   error
	Usage string
}

func (u *UsageError) Error() string { return u.Err.Error() }
func (u *UsageError) Unwrap() error { return u.Err }
