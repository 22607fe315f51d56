package chat

import (
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

// Render evaluates the template for msgs and returns the prompt text.
func (t *Template) Render(msgs []Message, opts Options) (out string, err error) {
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

	var b strings.Builder
	execErr := t.tpl.Execute(&b, exec.NewContext(data))
	mu.Lock()
	defer mu.Unlock()
	if raised != nil {
		// gonja flattens function errors into strings, so report the
		// template's own message rather than gonja's wrapping of it.
		return "", fmt.Errorf("%w: %w", ErrRender, raised)
	}
	if execErr != nil {
		return "", fmt.Errorf("%w: %w", ErrRender, execErr)
	}
	return b.String(), nil
}
