package openai

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/service"
)

// chatCall is a chat request after the checks that need no model.
type chatCall struct {
	req    *chatRequest
	params engine.SampleParams
	n      int
	stop   []string
	msgs   []service.ChatMessage
}

// checkChat parses a chat request and checks everything that does not depend on the
// model: fields, values, messages.
func checkChat(body []byte, lim config.Limits) (*chatCall, *apiError) {
	var c chatRequest
	if e := decodeBody(body, chatFields, &c); e != nil {
		return nil, e
	}
	p, n, stop, e := c.params(lim)
	if e != nil {
		return nil, e
	}
	if e := c.checkOptions(); e != nil {
		return nil, e
	}
	// Refused before each message is parsed; the render checks it again (issue 22).
	if len(c.Messages) > lim.MaxChatMessages {
		return nil, invalid("messages", "invalid_value", "%d messages; at most %d are allowed (limits.max_chat_messages)", len(c.Messages), lim.MaxChatMessages)
	}
	msgs, e := parseMessages(c.Messages)
	if e != nil {
		return nil, e
	}
	conv := make([]service.ChatMessage, len(msgs))
	for i, m := range msgs {
		conv[i] = service.ChatMessage{Role: m.Role, Content: m.Content}
	}
	return &chatCall{req: &c, params: p, n: n, stop: stop, msgs: conv}, nil
}

// parseChat checks a chat request and builds its generation (the prompt rendered with
// the model's chat template and add_generation_prompt).
func parseChat(ctx context.Context, body []byte, svc *service.Service, tenant string, lim config.Limits) (*chatRequest, textgen.Request, error) {
	cc, e := checkChat(body, lim)
	if e != nil {
		return nil, textgen.Request{}, e
	}
	c, p := cc.req, cc.params
	t, err := svc.ResolveInference(tenant, c.Model)
	if err != nil {
		return nil, textgen.Request{}, err
	}
	// Rendering and tokenizing stop once the prompt cannot fit the context, or the
	// client has gone (ctx).
	text, err := t.RenderChat(ctx, cc.msgs, true)
	if err != nil {
		return nil, textgen.Request{}, contextExceeded("messages", err)
	}
	toks, err := t.EncodePrompt(ctx, text)
	if err != nil {
		return nil, textgen.Request{}, contextExceeded("messages", err)
	}
	param, mt := "max_completion_tokens", c.MaxCompletionTokens
	if mt == nil {
		param, mt = "max_tokens", c.MaxTokens
	}
	if p.MaxTokens, e = maxTokens(param, mt, 0, len(toks), t.MaxContextLength, lim); e != nil {
		return nil, textgen.Request{}, e
	}
	req := textgen.Request{Target: t, Prompts: [][]int32{toks}, N: cc.n, Params: p, Stop: cc.stop, Stream: c.stream()}
	if c.TopLogprobs != nil {
		req.TopLogprobs = *c.TopLogprobs
	}
	return c, req, nil
}

func (h *handler) chat(w http.ResponseWriter, r *http.Request, tenant string) {
	body, err := textgen.ReadBody(w, r, h.d.MaxRequestBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	c, req, err := parseChat(r.Context(), body, h.d.Service, tenant, h.d.Service.Limits())
	if err != nil {
		writeError(w, err)
		return
	}
	cw := &chatWriter{w: w, respID: "chatcmpl-" + h.d.NewID(), created: h.created(), model: c.Model,
		logprobs: c.Logprobs != nil && *c.Logprobs, n: req.N, collect: textgen.NewCollect(req.N)}
	if req.Stream {
		cw.sse, cw.usage = textgen.NewSSE(w), c.includeUsage()
	}
	h.run(w, r, tenant, opChat, req, cw)
}

// chatRendered answers POST /chat/render.
type chatRendered struct {
	Model        string `json:"model"`
	Prompt       string `json:"prompt"`
	PromptTokens int    `json:"prompt_tokens"`
}

// chatRender renders a chat request's messages with the model's chat template (and the
// generation prompt), as /chat/completions would before generating, and answers the text
// and its token count without generating: the console's playground shows it. It takes
// the same body as /chat/completions, checked the same way.
func (h *handler) chatRender(w http.ResponseWriter, r *http.Request, tenant string) {
	body, err := textgen.ReadBody(w, r, h.d.MaxRequestBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	cc, e := checkChat(body, h.d.Service.Limits())
	if e != nil {
		writeError(w, e)
		return
	}
	t, err := h.d.Service.ResolveInference(tenant, cc.req.Model)
	if err != nil {
		writeError(w, err)
		return
	}
	text, err := t.RenderChat(r.Context(), cc.msgs, true)
	if err != nil {
		writeError(w, contextExceeded("messages", err))
		return
	}
	toks, err := t.EncodePrompt(r.Context(), text)
	if err != nil {
		writeError(w, contextExceeded("messages", err))
		return
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, chatRendered{Model: cc.req.Model, Prompt: text, PromptTokens: len(toks)})
}

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage"`
}

type chatChoice struct {
	Index        int            `json:"index"`
	Message      chatOutMessage `json:"message"`
	Logprobs     *chatLogprobs  `json:"logprobs"`
	FinishReason string         `json:"finish_reason"`
}

type chatOutMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

type chatLogprobs struct {
	Content []tokenLogprob `json:"content"`
	Refusal []tokenLogprob `json:"refusal"`
}

type tokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float32      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []topLogprob `json:"top_logprobs"`
}

type topLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func byteList(s string) []int {
	out := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int(s[i])
	}
	return out
}

func chatTokens(toks []textgen.Token) []tokenLogprob {
	out := make([]tokenLogprob, len(toks))
	for i, t := range toks {
		out[i] = tokenLogprob{Token: t.Text, Logprob: t.Logprob, Bytes: byteList(t.Text), TopLogprobs: []topLogprob{}}
		for _, a := range t.Top {
			out[i].TopLogprobs = append(out[i].TopLogprobs, topLogprob{Token: a.Text, Logprob: a.Logprob, Bytes: byteList(a.Text)})
		}
	}
	return out
}

type chatChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// chatWriter answers a chat completion: collected into one JSON reply, or as chunks.
type chatWriter struct {
	w        http.ResponseWriter
	sse      *textgen.SSE
	usage    bool
	respID   string
	created  int64
	model    string
	logprobs bool
	n        int
	collect  textgen.Collect
	opened   bool
}

func (c *chatWriter) id() string              { return c.respID }
func (c *chatWriter) started() bool           { return c.sse != nil && c.sse.Started() }
func (c *chatWriter) finishReasons() []string { return c.collect.FinishReasons() }
func (c *chatWriter) chunk(ch chatChunk) error {
	ch.ID, ch.Object, ch.Created, ch.Model = c.respID, "chat.completion.chunk", c.created, c.model
	if ch.Choices == nil {
		ch.Choices = []chunkChoice{}
	}
	b, err := json.Marshal(ch)
	if err != nil {
		return err
	}
	return c.sse.Event("", b)
}

func (c *chatWriter) piece(p textgen.Piece) error {
	c.collect.Add(p)
	if c.sse == nil {
		return nil
	}
	if !c.opened {
		// Every choice opens with the assistant role, as OpenAI's streams do.
		c.opened = true
		empty := ""
		for i := 0; i < c.n; i++ {
			if err := c.chunk(chatChunk{Choices: []chunkChoice{{Index: i, Delta: chatDelta{Role: "assistant", Content: &empty}}}}); err != nil {
				return err
			}
		}
	}
	if p.Text != "" || (c.logprobs && len(p.Tokens) > 0) {
		text := p.Text
		ch := chunkChoice{Index: p.Choice, Delta: chatDelta{Content: &text}}
		if c.logprobs {
			ch.Logprobs = &chatLogprobs{Content: chatTokens(p.Tokens)}
		}
		if err := c.chunk(chatChunk{Choices: []chunkChoice{ch}}); err != nil {
			return err
		}
	}
	if p.Finish != "" {
		f := p.Finish
		return c.chunk(chatChunk{Choices: []chunkChoice{{Index: p.Choice, FinishReason: &f}}})
	}
	return nil
}

func (c *chatWriter) done(sum textgen.Summary) error {
	if c.sse != nil {
		if c.usage {
			if err := c.chunk(chatChunk{Choices: []chunkChoice{}, Usage: usageOf(sum)}); err != nil {
				return err
			}
		}
		return c.sse.Event("", []byte("[DONE]"))
	}
	out := chatCompletion{ID: c.respID, Object: "chat.completion", Created: c.created, Model: c.model, Usage: usageOf(sum)}
	for i := range c.collect {
		ch := &c.collect[i]
		cc := chatChoice{Index: i, Message: chatOutMessage{Role: "assistant", Content: ch.Text.String()}, FinishReason: ch.Finish}
		if c.logprobs {
			cc.Logprobs = &chatLogprobs{Content: chatTokens(ch.Tokens)}
		}
		out.Choices = append(out.Choices, cc)
	}
	textgen.WriteJSON(c.w, encodingFailed, http.StatusOK, out)
	return nil
}

func (c *chatWriter) fail(e *apiError) {
	b, _ := json.Marshal(e.body())
	_ = c.sse.Event("", b)
}
