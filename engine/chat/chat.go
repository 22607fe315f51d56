package chat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// templateName is the in-memory path the template source is stored under.
const templateName = "/chat_template"

// ErrParse is wrapped by every error Parse returns.
var ErrParse = errors.New("chat: parse template")

// ErrRender is wrapped by every error Render returns, including those raised by
// the template through raise_exception.
var ErrRender = errors.New("chat: render template")

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Options are the per-call inputs of Render besides the messages.
type Options struct {
	// AddGenerationPrompt asks the template to end with the header that opens
	// an assistant turn (add_generation_prompt in the template).
	AddGenerationPrompt bool
	// BosToken and EosToken are exposed as bos_token and eos_token.
	BosToken, EosToken string
	// Extra holds further template variables (for example tools or
	// date_string). Its keys override the standard variables of the same name.
	Extra map[string]any
	// Limits bound the render; the zero value bounds nothing.
	Limits Limits
}

// Limits bound one render, so that a conversation from a request costs in proportion
// to what the server accepts (issue 22). A value ≤ 0 is no bound.
type Limits struct {
	// MaxMessages and MaxBytes are checked before rendering starts: the number of
	// messages, and their roles' and contents' bytes together.
	MaxMessages int
	MaxBytes    int64
	// MaxOutputBytes bounds the rendered text; rendering stops as soon as it passes it
	// (a caller derives it from the model's context: past it, the prompt cannot fit).
	MaxOutputBytes int64
}

// ErrLimit is wrapped by the *LimitError Render returns when a conversation is over
// one of its Limits.
var ErrLimit = errors.New("chat: conversation over a limit")

// Which limit a LimitError names.
const (
	LimitMessages = "messages"
	LimitBytes    = "bytes"
	LimitOutput   = "output"
)

// LimitError says which of Options.Limits a render passed: Limit is LimitMessages,
// LimitBytes or LimitOutput; Max is the bound and Got what the conversation has (for
// LimitOutput, the bytes rendered when rendering stopped).
type LimitError struct {
	Limit    string
	Max, Got int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("chat: %d %s, over the limit of %d", e.Got, e.Limit, e.Max)
}

// Unwrap makes a LimitError match ErrLimit.
func (e *LimitError) Unwrap() error { return ErrLimit }

// boundedWriter is the render's output: it stops the render once ctx ends or the text
// passes max bytes (max ≤ 0: no bound). gonja returns a writer's error from the
// statement that wrote, so the template stops at its next output; err keeps the cause,
// which gonja's wrapping would flatten.
type boundedWriter struct {
	ctx context.Context
	b   strings.Builder
	max int64
	err error
}

func (w *boundedWriter) Write(p []byte) (int, error) { return w.WriteString(string(p)) }

func (w *boundedWriter) WriteString(s string) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if err := w.ctx.Err(); err != nil {
		w.err = err
		return 0, err
	}
	if n := int64(w.b.Len() + len(s)); w.max > 0 && n > w.max {
		w.err = &LimitError{Limit: LimitOutput, Max: w.max, Got: n}
		return 0, w.err
	}
	return w.b.WriteString(s)
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	tpl *exec.Template
}

// RaiseError is the error a template produces by calling raise_exception.
// Render returns it wrapped together with ErrRender.
type RaiseError struct {
	// Message is the argument the template passed to raise_exception.
	Message string
}

func (e *RaiseError) Error() string { return e.Message }

// environment mirrors gonja's default environment; building it here keeps
// this package independent of gonja's package-level defaults.
var environment = &exec.Environment{
	Context:           exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables),
	Filters:           builtins.Filters,
	Tests:             builtins.Tests,
	ControlStructures: builtins.ControlStructures,
	Methods:           builtins.Methods,
}

// newConfig returns the Jinja settings transformers uses for chat templates.
func newConfig() *config.Config {
	c := config.New()
	c.TrimBlocks = true
	c.LeftStripBlocks = true
	return c
}

// Parse compiles a chat template once; the result can be rendered many times.
func Parse(src string) (t *Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("%w: %v", ErrParse, r)
		}
	}()
	loader, err := loaders.NewMemoryLoader(map[string]string{templateName: src})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrParse, err)
	}
	tpl, err := exec.NewTemplate(templateName, newConfig(), loader, environment)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrParse, trimSource(err, src))
	}
	return &Template{tpl: tpl}, nil
}

// trimSource drops the template text gonja embeds in its parse errors, which
// would otherwise repeat the whole (often kilobytes long) template.
func trimSource(err error, src string) error {
	if src == "" || !strings.Contains(err.Error(), src) {
		return err
	}
	if inner := errors.Unwrap(err); inner != nil {
		return inner
	}
	return errors.New(strings.ReplaceAll(err.Error(), src, "..."))
}

// Render evaluates the template for msgs and returns the prompt text. It refuses a
// conversation over opts.Limits' message or byte bounds before it starts (a
// *LimitError), stops with a *LimitError once the text passes MaxOutputBytes, and with
// ctx's error once ctx ends (checked at every piece of output).
func (t *Template) Render(ctx context.Context, msgs []Message, opts Options) (out string, err error) {
	lim := opts.Limits
	if lim.MaxMessages > 0 && len(msgs) > lim.MaxMessages {
		return "", &LimitError{Limit: LimitMessages, Max: int64(lim.MaxMessages), Got: int64(len(msgs))}
	}
	if lim.MaxBytes > 0 {
		var n int64
		for _, m := range msgs {
			n += int64(len(m.Role) + len(m.Content))
		}
		if n > lim.MaxBytes {
			return "", &LimitError{Limit: LimitBytes, Max: lim.MaxBytes, Got: n}
		}
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	var (
		mu     sync.Mutex
		raised *RaiseError
	)
	raise := func(msg string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if raised == nil {
			raised = &RaiseError{Message: msg}
		}
		return "", raised
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("%w: %v", ErrRender, r)
		}
	}()

	list := make([]any, len(msgs))
	for i, m := range msgs {
		list[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	data := map[string]any{
		"messages":              list,
		"add_generation_prompt": opts.AddGenerationPrompt,
		"bos_token":             opts.BosToken,
		"eos_token":             opts.EosToken,
		"raise_exception":       raise,
	}
	for k, v := range opts.Extra {
		data[k] = v
	}

	b := &boundedWriter{ctx: ctx, max: lim.MaxOutputBytes}
	execErr := t.tpl.Execute(b, exec.NewContext(data))
	mu.Lock()
	defer mu.Unlock()
	if b.err != nil {
		return "", b.err
	}
	if raised != nil {
		// gonja flattens function errors into strings, so report the
		// template's own message rather than gonja's wrapping of it.
		return "", fmt.Errorf("%w: %w", ErrRender, raised)
	}
	if execErr != nil {
		return "", fmt.Errorf("%w: %w", ErrRender, execErr)
	}
	return b.b.String(), nil
}
