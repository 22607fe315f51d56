// Package anthropic serves the Anthropic-compatible routes under /anthropic/api (the
// path Tinker uses): POST /v1/messages, whole or streamed in Anthropic's event format,
// and POST /v1/messages/count_tokens, on base models and trained checkpoints. Requests
// run through the service's sampling path (textgen), like the OpenAI-compatible routes.
// docs/openai.md describes both.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
)

// Prefix is where the routes are mounted; clients append /v1/messages to it.
const Prefix = "/anthropic/api"

type handler struct{ d textgen.Deps }

// Mount registers the routes on mux.
func Mount(mux textgen.Mux, d textgen.Deps) {
	h := &handler{d: d.WithDefaults()}
	mux.HandleFunc("POST "+Prefix+"/v1/messages", h.authed(h.messages))
	mux.HandleFunc("POST "+Prefix+"/v1/messages/count_tokens", h.authed(h.countTokens))
	mux.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: "not_found_error",
			Message: "Not found: " + r.Method + " " + r.URL.Path + ". This server serves POST /v1/messages and POST /v1/messages/count_tokens under " + Prefix + "."})
	})
}

func (h *handler) authed(f func(w http.ResponseWriter, r *http.Request, tenant string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tenant, err := h.d.Authenticate(r)
		if err != nil {
			writeError(w, err)
			return
		}
		f(w, r, tenant)
	}
}

var messageRequestFields = map[string]textgen.FieldRule{
	"model": textgen.Parsed, "max_tokens": textgen.Parsed, "messages": textgen.Parsed, "system": textgen.Parsed,
	"stop_sequences": textgen.Parsed, "temperature": textgen.Parsed, "top_p": textgen.Parsed, "top_k": textgen.Parsed,
	"stream": textgen.Parsed, "service_tier": textgen.Parsed, "thinking": textgen.Parsed, "tool_choice": textgen.Parsed,
	"speed": textgen.Parsed,
	// Abuse detection, caching hints, routing and accounting: they do not change the output.
	"metadata": textgen.Ignored, "cache_control": textgen.Ignored, "inference_geo": textgen.Ignored,
	"user_profile_id": textgen.Ignored, "workspace_id": textgen.Ignored,
	"tools": textgen.DefaultOnly, "container": textgen.DefaultOnly, "mcp_servers": textgen.DefaultOnly,
	"context_management": textgen.DefaultOnly, "output_config": textgen.DefaultOnly, "diagnostics": textgen.DefaultOnly,
}

// count_tokens takes the prompt part of a messages request.
var countFields = map[string]textgen.FieldRule{
	"model": textgen.Parsed, "messages": textgen.Parsed, "system": textgen.Parsed,
	"thinking": textgen.Parsed, "tool_choice": textgen.Parsed, "speed": textgen.Parsed,
	"cache_control": textgen.Ignored, "user_profile_id": textgen.Ignored, "workspace_id": textgen.Ignored,
	"tools": textgen.DefaultOnly, "mcp_servers": textgen.DefaultOnly, "context_management": textgen.DefaultOnly,
	"output_config": textgen.DefaultOnly,
}

type messagesRequest struct {
	Model         string            `json:"model"`
	MaxTokens     *int              `json:"max_tokens"`
	Messages      []json.RawMessage `json:"messages"`
	System        json.RawMessage   `json:"system"`
	StopSequences []string          `json:"stop_sequences"`
	Temperature   *float64          `json:"temperature"`
	TopP          *float64          `json:"top_p"`
	TopK          *int              `json:"top_k"`
	Stream        *bool             `json:"stream"`
	ServiceTier   *string           `json:"service_tier"`
	Thinking      *struct {
		Type string `json:"type"`
	} `json:"thinking"`
	ToolChoice *struct {
		Type string `json:"type"`
	} `json:"tool_choice"`
	Speed *string `json:"speed"`
}

func decode(body []byte, rules map[string]textgen.FieldRule, into any) *apiError {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return invalid("the request body must be a JSON object")
	}
	if k, unknown, ok := textgen.CheckFields(raw, rules); !ok {
		if unknown {
			return invalid("%s: Extra inputs are not permitted", k)
		}
		return invalid("%s: not supported by this server (only its default, which changes nothing, is accepted)", k)
	}
	if err := json.Unmarshal(body, into); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return invalid("%s: expected %s, got a JSON %s", te.Field, te.Type, te.Value)
		}
		return invalid("the request body is not valid: %v", err)
	}
	return nil
}

// checkOptions refuses values of parsed fields we cannot honour.
func (m *messagesRequest) checkOptions() *apiError {
	if m.Thinking != nil && m.Thinking.Type != "" && m.Thinking.Type != "disabled" {
		return invalid("thinking: type %q is not supported by this server (only disabled)", m.Thinking.Type)
	}
	if m.ToolChoice != nil && m.ToolChoice.Type != "" && m.ToolChoice.Type != "none" && m.ToolChoice.Type != "auto" {
		return invalid("tool_choice: type %q is not supported by this server: tools are not", m.ToolChoice.Type)
	}
	if sp := m.Speed; sp != nil && *sp != "standard" {
		return invalid("speed: %q is not supported by this server (only standard)", *sp)
	}
	if t := m.ServiceTier; t != nil && *t != "auto" && *t != "standard_only" {
		return invalid("service_tier: %q must be auto or standard_only", *t)
	}
	return nil
}

// prompt renders the conversation with the model's chat template. A last message from
// the assistant is a prefill: the reply continues it.
func prompt(ctx context.Context, t *service.InferenceTarget, system json.RawMessage, msgs []json.RawMessage, lim config.Limits) ([]int32, *apiError, error) {
	if len(msgs) == 0 {
		return nil, invalid("messages: at least one message is required"), nil
	}
	// Refused before each message is parsed; the render checks it again (issue 22).
	if len(msgs) > lim.MaxChatMessages {
		return nil, invalid("messages: %d messages; at most %d are allowed (limits.max_chat_messages)", len(msgs), lim.MaxChatMessages), nil
	}
	var conv []service.ChatMessage
	if len(system) > 0 && string(system) != "null" {
		s, e := blocksText(system, "system")
		if e != nil {
			return nil, e, nil
		}
		conv = append(conv, service.ChatMessage{Role: "system", Content: s})
	}
	for i, raw := range msgs {
		at := fmt.Sprintf("messages.%d", i)
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
			return nil, invalid("%s: must be an object with role and content", at), nil
		}
		for k := range fields {
			if k != "role" && k != "content" {
				return nil, invalid("%s.%s: Extra inputs are not permitted", at, k), nil
			}
		}
		_ = json.Unmarshal(raw, &m)
		if m.Role != "user" && m.Role != "assistant" {
			return nil, invalid("%s.role: %q must be user or assistant", at, m.Role), nil
		}
		text, e := blocksText(m.Content, at+".content")
		if e != nil {
			return nil, e, nil
		}
		conv = append(conv, service.ChatMessage{Role: m.Role, Content: text})
	}
	prefill := ""
	if last := conv[len(conv)-1]; last.Role == "assistant" {
		prefill, conv = last.Content, conv[:len(conv)-1]
	}
	// Rendering and tokenizing stop once the prompt cannot fit the context, or the
	// client has gone (ctx).
	text, err := t.RenderChat(ctx, conv, true)
	if err != nil {
		return nil, nil, err
	}
	toks, err := t.EncodePrompt(ctx, text+prefill)
	return toks, nil, err
}

// blocksText reads content: a string, or text blocks (joined with "\n").
func blocksText(raw json.RawMessage, at string) (string, *apiError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", invalid("%s: must be a string or an array of content blocks", at)
	}
	texts := make([]string, 0, len(blocks))
	for j, b := range blocks {
		bat := fmt.Sprintf("%s.%d", at, j)
		var typ string
		_ = json.Unmarshal(b["type"], &typ)
		if typ != "text" {
			return "", invalid("%s.type: %q blocks are not supported by this server: only text", bat, typ)
		}
		for k, v := range b {
			switch k {
			case "type", "text":
			case "cache_control": // a caching hint; it does not change the output
			case "citations":
				if !textgen.IsNoOp(v) {
					return "", invalid("%s.citations: not supported by this server", bat)
				}
			default:
				return "", invalid("%s.%s: Extra inputs are not permitted", bat, k)
			}
		}
		var t string
		if err := json.Unmarshal(b["text"], &t); err != nil {
			return "", invalid("%s.text: must be a string", bat)
		}
		texts = append(texts, t)
	}
	return strings.Join(texts, "\n"), nil
}

// parseMessages checks a messages request and builds its generation.
func parseMessages(ctx context.Context, body []byte, svc *service.Service, tenant string, lim config.Limits) (*messagesRequest, textgen.Request, error) {
	var m messagesRequest
	if e := decode(body, messageRequestFields, &m); e != nil {
		return nil, textgen.Request{}, e
	}
	if e := m.checkOptions(); e != nil {
		return nil, textgen.Request{}, e
	}
	if m.Model == "" {
		return nil, textgen.Request{}, invalid("model: Field required")
	}
	if m.MaxTokens == nil {
		return nil, textgen.Request{}, invalid("max_tokens: Field required")
	}
	p := engine.SampleParams{Temperature: 1, TopP: 1, TopK: -1}
	if t := m.Temperature; t != nil {
		if math.IsNaN(*t) || *t < 0 || *t > 1 {
			return nil, textgen.Request{}, invalid("temperature: %g must be between 0 and 1", *t)
		}
		p.Temperature = *t
	}
	if t := m.TopP; t != nil {
		if math.IsNaN(*t) || *t <= 0 || *t > 1 {
			return nil, textgen.Request{}, invalid("top_p: %g must be greater than 0 and at most 1", *t)
		}
		p.TopP = *t
	}
	if k := m.TopK; k != nil {
		if *k < 0 {
			return nil, textgen.Request{}, invalid("top_k: %d must not be negative", *k)
		}
		if *k > 0 {
			p.TopK = *k
		}
	}
	if len(m.StopSequences) > lim.MaxStopStrings {
		return nil, textgen.Request{}, invalid("stop_sequences: %d sequences; at most %d are allowed (limits.max_stop_strings)", len(m.StopSequences), lim.MaxStopStrings)
	}
	for i, s := range m.StopSequences {
		if s == "" {
			return nil, textgen.Request{}, invalid("stop_sequences.%d: must not be empty", i)
		}
	}
	t, err := svc.ResolveInference(tenant, m.Model)
	if err != nil {
		return nil, textgen.Request{}, err
	}
	toks, e, err := prompt(ctx, t, m.System, m.Messages, lim)
	if e != nil {
		return nil, textgen.Request{}, e
	}
	if err != nil {
		return nil, textgen.Request{}, err
	}
	switch mt := *m.MaxTokens; {
	case mt < 1:
		return nil, textgen.Request{}, invalid("max_tokens: %d must be at least 1", mt)
	case mt > lim.MaxSampleTokens:
		return nil, textgen.Request{}, invalid("max_tokens: %d is above the limit of %d (limits.max_sample_tokens)", mt, lim.MaxSampleTokens)
	case config.ExceedsContext(t.MaxContextLength, len(toks), mt):
		return nil, textgen.Request{}, invalid("prompt is too long: %d tokens + max_tokens %d > %d, the model's context length", len(toks), mt, t.MaxContextLength)
	}
	p.MaxTokens = *m.MaxTokens
	req := textgen.Request{Target: t, Prompts: [][]int32{toks}, N: 1, Params: p, Stop: m.StopSequences,
		Stream: m.Stream != nil && *m.Stream}
	return &m, req, nil
}

func (h *handler) messages(w http.ResponseWriter, r *http.Request, tenant string) {
	body, err := textgen.ReadBody(w, r, h.d.MaxRequestBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	m, req, err := parseMessages(r.Context(), body, h.d.Service, tenant, h.d.Service.Limits())
	if err != nil {
		writeError(w, err)
		return
	}
	mw := &messageWriter{w: w, id: "msg_" + h.d.NewID(), model: m.Model, inputTokens: len(req.Prompts[0]), collect: textgen.NewCollect(1)}
	if req.Stream {
		mw.sse = textgen.NewSSE(w)
	}
	textgen.GenAIRequest(r, telemetry.GenAIOpChat, req.Target, req)
	textgen.NoWriteDeadline(w)
	start := h.d.Now()
	sum, err := textgen.Run(r.Context(), h.d.Service, tenant, req, func(p textgen.Piece) error {
		if req.Stream && p.Text != "" && mw.outTokens == 0 {
			textgen.FirstToken(r, start)
		}
		return mw.piece(p)
	})
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		if mw.sse != nil && mw.sse.Started() {
			b, _ := json.Marshal(toAPIError(err).body())
			_ = mw.sse.Event("error", b)
			return
		}
		writeError(w, err)
		return
	}
	textgen.GenAIResponse(r, mw.id, m.Model, sum, []string{stopReason(mw.collect[0].Finish, mw.collect[0].StopSequence)})
	_ = mw.done(sum)
}

// stopReason maps a finish to Anthropic's stop_reason.
func stopReason(finish, stopSeq string) string {
	switch {
	case stopSeq != "":
		return "stop_sequence"
	case finish == string(engine.StopReasonLength):
		return "max_tokens"
	}
	return "end_turn"
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

type message struct {
	ID           string      `json:"id"`
	Type         string      `json:"type"`
	Role         string      `json:"role"`
	Model        string      `json:"model"`
	Content      []textBlock `json:"content"`
	StopReason   *string     `json:"stop_reason"`
	StopSequence *string     `json:"stop_sequence"`
	Usage        usage       `json:"usage"`
}

// messageWriter answers a message: collected into one JSON reply, or as Anthropic's
// stream of events.
type messageWriter struct {
	w           http.ResponseWriter
	sse         *textgen.SSE
	id, model   string
	inputTokens int
	outTokens   int
	collect     textgen.Collect
}

func (m *messageWriter) event(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return m.sse.Event(name, b)
}

// Stream events, their fields in the order Anthropic writes them.
type (
	messageStart struct {
		Type    string  `json:"type"`
		Message message `json:"message"`
	}
	blockStart struct {
		Type         string    `json:"type"`
		Index        int       `json:"index"`
		ContentBlock textBlock `json:"content_block"`
	}
	textDelta struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	blockDelta struct {
		Type  string    `json:"type"`
		Index int       `json:"index"`
		Delta textDelta `json:"delta"`
	}
	blockStop struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	stopDelta struct {
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}
	outputUsage struct {
		OutputTokens int `json:"output_tokens"`
	}
	messageDelta struct {
		Type  string      `json:"type"`
		Delta stopDelta   `json:"delta"`
		Usage outputUsage `json:"usage"`
	}
	typeOnly struct {
		Type string `json:"type"`
	}
)

func (m *messageWriter) piece(p textgen.Piece) error {
	m.collect.Add(p)
	if m.sse == nil {
		return nil
	}
	if !m.sse.Started() {
		head := message{ID: m.id, Type: "message", Role: "assistant", Model: m.model, Content: []textBlock{},
			Usage: usage{InputTokens: m.inputTokens}}
		if err := m.event("message_start", messageStart{Type: "message_start", Message: head}); err != nil {
			return err
		}
		if err := m.event("content_block_start", blockStart{Type: "content_block_start", ContentBlock: textBlock{Type: "text"}}); err != nil {
			return err
		}
		if err := m.event("ping", typeOnly{Type: "ping"}); err != nil {
			return err
		}
	}
	m.outTokens += len(p.Tokens)
	if p.Text == "" {
		return nil
	}
	return m.event("content_block_delta", blockDelta{Type: "content_block_delta", Delta: textDelta{Type: "text_delta", Text: p.Text}})
}

func (m *messageWriter) done(sum textgen.Summary) error {
	c := &m.collect[0]
	reason := stopReason(c.Finish, c.StopSequence)
	var seq *string
	if c.StopSequence != "" {
		seq = &c.StopSequence
	}
	if m.sse == nil {
		textgen.WriteJSON(m.w, encodingFailed, http.StatusOK, message{ID: m.id, Type: "message", Role: "assistant", Model: m.model,
			Content: []textBlock{{Type: "text", Text: c.Text.String()}}, StopReason: &reason, StopSequence: seq,
			Usage: usage{InputTokens: sum.PromptTokens, OutputTokens: sum.CompletionTokens}})
		return nil
	}
	if err := m.event("content_block_stop", blockStop{Type: "content_block_stop"}); err != nil {
		return err
	}
	if err := m.event("message_delta", messageDelta{Type: "message_delta", Delta: stopDelta{StopReason: reason, StopSequence: seq},
		Usage: outputUsage{OutputTokens: sum.CompletionTokens}}); err != nil {
		return err
	}
	return m.event("message_stop", typeOnly{Type: "message_stop"})
}

func (h *handler) countTokens(w http.ResponseWriter, r *http.Request, tenant string) {
	body, err := textgen.ReadBody(w, r, h.d.MaxRequestBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	var m messagesRequest
	if e := decode(body, countFields, &m); e != nil {
		writeError(w, e)
		return
	}
	if e := m.checkOptions(); e != nil {
		writeError(w, e)
		return
	}
	if m.Model == "" {
		writeError(w, invalid("model: Field required"))
		return
	}
	t, err := h.d.Service.ResolveInference(tenant, m.Model)
	if err != nil {
		writeError(w, err)
		return
	}
	toks, e, err := prompt(r.Context(), t, m.System, m.Messages, h.d.Service.Limits())
	if e != nil {
		writeError(w, e)
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, map[string]int{"input_tokens": len(toks)})
}
