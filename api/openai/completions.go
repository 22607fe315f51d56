package openai

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"unicode/utf8"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/tokenizer"
	"github.com/tuft-go/tuft/service"
)

// completionDefaultMaxTokens is OpenAI's default max_tokens for /completions.
const completionDefaultMaxTokens = 16

// parseCompletion checks a completions request and builds its generation; it also
// returns each prompt's text, for echo.
func parseCompletion(ctx context.Context, body []byte, svc *service.Service, tenant string, lim config.Limits) (*completionRequest, textgen.Request, []string, error) {
	cc, e := checkCompletion(body, lim)
	if e != nil {
		return nil, textgen.Request{}, nil, e
	}
	c, p, n, stop := cc.req, cc.params, cc.n, cc.stop
	t, err := svc.ResolveInference(tenant, c.Model)
	if err != nil {
		return nil, textgen.Request{}, nil, err
	}
	prompts, e := parsePrompt(c.Prompt, t.VocabSize)
	if e != nil {
		return nil, textgen.Request{}, nil, e
	}
	if len(prompts)*n > lim.MaxNumSamples {
		return nil, textgen.Request{}, nil, invalid("n", "invalid_value", "%d prompts × n %d = %d choices; at most %d are allowed (limits.max_num_samples)",
			len(prompts), n, len(prompts)*n, lim.MaxNumSamples)
	}
	req := textgen.Request{Target: t, N: n, Params: p, Stop: stop, Stream: c.stream()}
	texts := make([]string, len(prompts))
	longest := 0
	for i, pr := range prompts {
		toks := pr.tokens
		if pr.isText {
			if toks, err = t.EncodePrompt(ctx, pr.text); err != nil {
				return nil, textgen.Request{}, nil, contextExceeded("prompt", err)
			}
			texts[i] = pr.text
		} else {
			texts[i] = t.Decode(toks)
		}
		if len(toks) == 0 {
			return nil, textgen.Request{}, nil, invalid("prompt", "invalid_value", "the prompt is empty: there must be at least one token to continue")
		}
		req.Prompts = append(req.Prompts, toks)
		longest = max(longest, len(toks))
	}
	if p.MaxTokens, e = maxTokens("max_tokens", c.MaxTokens, completionDefaultMaxTokens, longest, t.MaxContextLength, lim); e != nil {
		return nil, textgen.Request{}, nil, e
	}
	req.Params.MaxTokens = p.MaxTokens
	if c.Logprobs != nil {
		req.TopLogprobs = *c.Logprobs
		if c.Echo != nil && *c.Echo {
			req.PromptLogprobs, req.PromptTopLogprobs = true, *c.Logprobs
		}
	}
	return c, req, texts, nil
}

// completionCall is a completions request after the checks that need no model.
type completionCall struct {
	req    *completionRequest
	params engine.SampleParams
	n      int
	stop   []string
}

// checkCompletion parses a completions request and checks everything that does not
// depend on the model (the prompt's tokens are checked against its vocabulary later).
func checkCompletion(body []byte, lim config.Limits) (*completionCall, *apiError) {
	var c completionRequest
	if e := decodeBody(body, completionFields, &c); e != nil {
		return nil, e
	}
	p, n, stop, e := c.params(lim)
	if e != nil {
		return nil, e
	}
	if e := c.checkOptions(); e != nil {
		return nil, e
	}
	return &completionCall{req: &c, params: p, n: n, stop: stop}, nil
}

func (h *handler) completions(w http.ResponseWriter, r *http.Request, tenant string) {
	body, err := textgen.ReadBody(w, r, h.d.MaxRequestBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	c, req, texts, err := parseCompletion(r.Context(), body, h.d.Service, tenant, h.d.Service.Limits())
	if err != nil {
		writeError(w, err)
		return
	}
	cw := &completionWriter{w: w, respID: "cmpl-" + h.d.NewID(), created: h.created(), model: c.Model,
		logprobs: c.Logprobs != nil, echo: c.Echo != nil && *c.Echo, n: req.N, prompts: texts, req: req,
		collect: textgen.NewCollect(req.N * len(req.Prompts))}
	if req.Stream {
		cw.sse, cw.usage = textgen.NewSSE(w), c.includeUsage()
		cw.echoed = make([]bool, len(cw.collect))
	}
	h.run(w, r, tenant, opCompletion, req, cw)
}

type completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type completionChoice struct {
	Text         string              `json:"text"`
	Index        int                 `json:"index"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// completionLogprobs is the legacy logprobs object; a null entry is JSON null (the
// first prompt token has no logprob).
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float32           `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
	offset        int                  // characters so far
}

func (l *completionLogprobs) add(text string, lp *float32, top []textgen.Alt, withTop bool) {
	l.Tokens = append(l.Tokens, text)
	l.TokenLogprobs = append(l.TokenLogprobs, lp)
	var m map[string]float32
	if withTop {
		m = map[string]float32{}
		for _, a := range top {
			if _, dup := m[a.Text]; !dup {
				m[a.Text] = a.Logprob
			}
		}
	}
	l.TopLogprobs = append(l.TopLogprobs, m)
	l.TextOffset = append(l.TextOffset, l.offset)
	l.offset += utf8.RuneCountInString(text)
}

// completionWriter answers a completion: collected into one JSON reply, or as chunks.
type completionWriter struct {
	w        http.ResponseWriter
	sse      *textgen.SSE
	usage    bool
	respID   string
	created  int64
	model    string
	logprobs bool
	echo     bool
	n        int
	prompts  []string
	req      textgen.Request
	collect  textgen.Collect
	echoed   []bool
	offsets  []int // streamed characters per choice, for text_offset
}

func (c *completionWriter) id() string              { return c.respID }
func (c *completionWriter) started() bool           { return c.sse != nil && c.sse.Started() }
func (c *completionWriter) finishReasons() []string { return c.collect.FinishReasons() }

func (c *completionWriter) chunk(choices []completionChoice, u *usage) error {
	if choices == nil {
		choices = []completionChoice{}
	}
	b, err := json.Marshal(completion{ID: c.respID, Object: "text_completion", Created: c.created, Model: c.model, Choices: choices, Usage: u})
	if err != nil {
		return err
	}
	return c.sse.Event("", b)
}

func (c *completionWriter) tokenLogprobs(toks []textgen.Token, lp *completionLogprobs) {
	for _, t := range toks {
		v := t.Logprob
		lp.add(t.Text, &v, t.Top, c.req.TopLogprobs > 0)
	}
}

func (c *completionWriter) piece(p textgen.Piece) error {
	c.collect.Add(p)
	if c.sse == nil {
		return nil
	}
	if c.offsets == nil {
		c.offsets = make([]int, len(c.collect))
	}
	text := p.Text
	if c.echo && !c.echoed[p.Choice] {
		c.echoed[p.Choice] = true
		text = c.prompts[p.Choice/c.n] + text
	}
	ch := completionChoice{Text: text, Index: p.Choice}
	if c.logprobs {
		lp := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{},
			offset: c.offsets[p.Choice]}
		if c.echo && text != p.Text {
			lp.offset += utf8.RuneCountInString(text) - utf8.RuneCountInString(p.Text)
		}
		c.tokenLogprobs(p.Tokens, lp)
		c.offsets[p.Choice] = lp.offset
		ch.Logprobs = lp
	} else {
		c.offsets[p.Choice] += utf8.RuneCountInString(text)
	}
	if p.Finish != "" {
		f := p.Finish
		ch.FinishReason = &f
	}
	if ch.Text == "" && ch.FinishReason == nil && (ch.Logprobs == nil || len(ch.Logprobs.Tokens) == 0) {
		return nil
	}
	return c.chunk([]completionChoice{ch}, nil)
}

func (c *completionWriter) done(sum textgen.Summary) error {
	if c.sse != nil {
		if c.usage {
			if err := c.chunk(nil, usageOf(sum)); err != nil {
				return err
			}
		}
		return c.sse.Event("", []byte("[DONE]"))
	}
	out := completion{ID: c.respID, Object: "text_completion", Created: c.created, Model: c.model, Usage: usageOf(sum),
		Choices: make([]completionChoice, 0, len(c.collect))}
	for i := range c.collect {
		ch := &c.collect[i]
		pi := i / c.n
		text := ch.Text.String()
		if c.echo {
			text = c.prompts[pi] + text
		}
		f := ch.Finish
		cc := completionChoice{Text: text, Index: i, FinishReason: &f}
		if c.logprobs {
			lp := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
			if c.echo && pi < len(sum.PromptLogprobs) {
				prompt := c.req.Prompts[pi]
				// Each token's text in context, as the alternatives' are.
				text := tokenizer.NewStream(c.req.Target)
				for j, id := range prompt {
					var v *float32
					if j > 0 && j < len(sum.PromptLogprobs[pi]) && !math.IsNaN(float64(sum.PromptLogprobs[pi][j])) {
						x := sum.PromptLogprobs[pi][j]
						v = &x
					}
					var top []textgen.Alt
					if j < len(sum.PromptTop[pi]) {
						top = sum.PromptTop[pi][j]
					}
					lp.add(text.Next(id), v, top, c.req.TopLogprobs > 0 && j > 0)
				}
			}
			c.tokenLogprobs(ch.Tokens, lp)
			cc.Logprobs = lp
		}
		out.Choices = append(out.Choices, cc)
	}
	textgen.WriteJSON(c.w, encodingFailed, http.StatusOK, out)
	return nil
}

func (c *completionWriter) fail(e *apiError) {
	b, _ := json.Marshal(e.body())
	_ = c.sse.Event("", b)
}
