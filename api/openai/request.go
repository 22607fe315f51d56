package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
)

// How each field is treated (textgen.FieldRule): OpenAI's own API answers an
// unrecognized argument with a 400, and so do we; fields OpenAI defines are parsed,
// accepted as no-ops where their value asks for nothing we would do differently, or
// refused with a 400 naming them (docs/openai.md has the table).
var chatFields = map[string]textgen.FieldRule{
	"model": textgen.Parsed, "messages": textgen.Parsed, "max_tokens": textgen.Parsed, "max_completion_tokens": textgen.Parsed,
	"temperature": textgen.Parsed, "top_p": textgen.Parsed, "top_k": textgen.Parsed, "n": textgen.Parsed, "stop": textgen.Parsed,
	"seed": textgen.Parsed, "logprobs": textgen.Parsed, "top_logprobs": textgen.Parsed, "stream": textgen.Parsed,
	"stream_options": textgen.Parsed, "response_format": textgen.Parsed, "modalities": textgen.Parsed, "service_tier": textgen.Parsed,
	"store": textgen.Parsed,
	// Identify the end user or group requests for OpenAI's abuse monitoring and prompt
	// cache routing; they do not change what is generated.
	"user": textgen.Ignored, "safety_identifier": textgen.Ignored, "prompt_cache_key": textgen.Ignored,
	// Kept with a stored completion; without store they have no effect on OpenAI either.
	"metadata":          textgen.Ignored,
	"frequency_penalty": textgen.DefaultOnly, "presence_penalty": textgen.DefaultOnly, "logit_bias": textgen.DefaultOnly,
	"tools": textgen.DefaultOnly, "tool_choice": textgen.Parsed, "parallel_tool_calls": textgen.DefaultOnly,
	"functions": textgen.DefaultOnly, "function_call": textgen.DefaultOnly, "audio": textgen.DefaultOnly,
	"prediction": textgen.DefaultOnly, "web_search_options": textgen.DefaultOnly, "reasoning_effort": textgen.DefaultOnly,
	"verbosity": textgen.DefaultOnly,
}

var completionFields = map[string]textgen.FieldRule{
	"model": textgen.Parsed, "prompt": textgen.Parsed, "max_tokens": textgen.Parsed, "temperature": textgen.Parsed,
	"top_p": textgen.Parsed, "top_k": textgen.Parsed, "n": textgen.Parsed, "stop": textgen.Parsed, "seed": textgen.Parsed,
	"logprobs": textgen.Parsed, "echo": textgen.Parsed, "stream": textgen.Parsed, "stream_options": textgen.Parsed,
	"best_of":           textgen.Parsed,
	"user":              textgen.Ignored,
	"frequency_penalty": textgen.DefaultOnly, "presence_penalty": textgen.DefaultOnly, "logit_bias": textgen.DefaultOnly,
	"suffix": textgen.DefaultOnly,
}

// checkFields applies the rules to the body's top-level keys.
func checkFields(raw map[string]json.RawMessage, rules map[string]textgen.FieldRule) *apiError {
	k, unknown, ok := textgen.CheckFields(raw, rules)
	switch {
	case ok:
		return nil
	case unknown:
		return invalid(k, "unknown_parameter", "Unrecognized request argument supplied: %s", k)
	}
	return unsupported(k, "%s is not supported by this server (only its default, which changes nothing, is accepted)", k)
}

// decodeBody parses the body as a JSON object and applies the field rules.
func decodeBody(body []byte, rules map[string]textgen.FieldRule, into any) *apiError {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return invalid("", "invalid_json", "the request body must be a JSON object: %v", jsonProblem(err))
	}
	if e := checkFields(raw, rules); e != nil {
		return e
	}
	if err := json.Unmarshal(body, into); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := strings.TrimPrefix(te.Field, "sampling.") // the embedded struct's name is no field
			return invalid(field, "invalid_type", "Invalid type for '%s': expected %s, but got a JSON %s instead.", field, jsonKind(te.Type.Kind()), te.Value)
		}
		return invalid("", "invalid_json", "the request body is not valid: %v", err)
	}
	return nil
}

// jsonKind names what a Go type accepts, in JSON terms.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

func jsonProblem(err error) string {
	if err == nil {
		return "got null"
	}
	return err.Error()
}

// sampling holds the parameters both routes share, as the client sent them.
type sampling struct {
	Model         string          `json:"model"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	N             *int            `json:"n"`
	Stop          json.RawMessage `json:"stop"`
	Seed          *int64          `json:"seed"`
	Stream        *bool           `json:"stream"`
	StreamOptions *struct {
		IncludeUsage       *bool `json:"include_usage"`
		IncludeObfuscation *bool `json:"include_obfuscation"`
	} `json:"stream_options"`
}

// params checks the shared parameters and turns them into the engine's.
func (s *sampling) params(lim config.Limits) (engine.SampleParams, int, []string, *apiError) {
	p := engine.SampleParams{Temperature: 1, TopP: 1, TopK: -1, Seed: s.Seed}
	if s.Model == "" {
		return p, 0, nil, invalid("model", "missing_required_parameter", "you must provide a model parameter")
	}
	if t := s.Temperature; t != nil {
		if math.IsNaN(*t) || *t < 0 || *t > 2 {
			return p, 0, nil, invalid("temperature", "invalid_value", "temperature %g must be between 0 and 2", *t)
		}
		p.Temperature = *t
	}
	if t := s.TopP; t != nil {
		if math.IsNaN(*t) || *t <= 0 || *t > 1 {
			return p, 0, nil, invalid("top_p", "invalid_value", "top_p %g must be greater than 0 and at most 1", *t)
		}
		p.TopP = *t
	}
	if k := s.TopK; k != nil {
		// An extension (as in vLLM): -1 or 0 means no limit.
		if *k < -1 {
			return p, 0, nil, invalid("top_k", "invalid_value", "top_k %d must be -1 or 0 (no limit) or positive", *k)
		}
		if *k > 0 {
			p.TopK = *k
		}
	}
	n := 1
	if s.N != nil {
		n = *s.N
		if n < 1 || n > lim.MaxNumSamples {
			return p, 0, nil, invalid("n", "invalid_value", "n %d must be between 1 and %d (limits.max_num_samples)", n, lim.MaxNumSamples)
		}
	}
	stop, e := parseStop(s.Stop, lim.MaxStopStrings)
	if e != nil {
		return p, 0, nil, e
	}
	if s.StreamOptions != nil && (s.Stream == nil || !*s.Stream) {
		return p, 0, nil, invalid("stream_options", "invalid_value", "stream_options is only allowed when stream is true")
	}
	return p, n, stop, nil
}

func (s *sampling) stream() bool { return s.Stream != nil && *s.Stream }

func (s *sampling) includeUsage() bool {
	return s.StreamOptions != nil && s.StreamOptions.IncludeUsage != nil && *s.StreamOptions.IncludeUsage
}

// parseStop accepts a string, an array of strings, or null.
func parseStop(raw json.RawMessage, limit int) ([]string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, invalid("stop", "invalid_value", "stop must not be an empty string")
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, invalid("stop", "invalid_type", "stop must be a string or an array of strings")
	}
	if len(many) > limit {
		return nil, invalid("stop", "invalid_value", "stop has %d sequences; at most %d are allowed (limits.max_stop_strings)", len(many), limit)
	}
	for i, s := range many {
		if s == "" {
			return nil, invalid(fmt.Sprintf("stop[%d]", i), "invalid_value", "stop sequences must not be empty")
		}
	}
	return many, nil
}

// maxTokens checks a requested completion length; def is used when none was given
// (0: as much as the context and limits.max_sample_tokens allow).
func maxTokens(param string, v *int, def, promptLen, maxContext int, lim config.Limits) (int, *apiError) {
	room := config.ContextRoom(maxContext, promptLen, lim.MaxSampleTokens)
	if v == nil {
		if room < 1 {
			return 0, invalid("messages", "context_length_exceeded", "the prompt has %d tokens, which leaves no room to generate within the model's context of %d tokens", promptLen, maxContext)
		}
		if def > 0 {
			return min(def, room), nil
		}
		return room, nil
	}
	if *v < 1 {
		return 0, invalid(param, "invalid_value", "%s %d must be at least 1", param, *v)
	}
	if *v > lim.MaxSampleTokens {
		return 0, invalid(param, "invalid_value", "%s %d is above the limit of %d (limits.max_sample_tokens)", param, *v, lim.MaxSampleTokens)
	}
	if config.ExceedsContext(maxContext, promptLen, *v) {
		return 0, invalid(param, "context_length_exceeded", "this model's maximum context length is %d tokens; the prompt has %d tokens and %s asks for %d more", maxContext, promptLen, param, *v)
	}
	return *v, nil
}

// chatRequest is POST /chat/completions.
type chatRequest struct {
	sampling
	Messages            []json.RawMessage `json:"messages"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Logprobs            *bool             `json:"logprobs"`
	TopLogprobs         *int              `json:"top_logprobs"`
	ResponseFormat      *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	Modalities  []string        `json:"modalities"`
	ServiceTier *string         `json:"service_tier"`
	Store       *bool           `json:"store"`
	ToolChoice  json.RawMessage `json:"tool_choice"`
}

// chatMessage is a message after checking: a role the template knows and its text.
type chatMessage struct {
	Role, Content string
}

// Message fields we read, and those OpenAI defines that carry nothing unless set.
var messageFields = map[string]textgen.FieldRule{
	"role": textgen.Parsed, "content": textgen.Parsed,
	"name": textgen.DefaultOnly, "tool_calls": textgen.DefaultOnly, "tool_call_id": textgen.DefaultOnly,
	"function_call": textgen.DefaultOnly, "audio": textgen.DefaultOnly, "refusal": textgen.DefaultOnly, "annotations": textgen.DefaultOnly,
}

// parseMessages checks the conversation: roles system, developer (given to the template
// as system), user and assistant; content a string or text parts (joined with "\n").
func parseMessages(msgs []json.RawMessage) ([]chatMessage, *apiError) {
	if len(msgs) == 0 {
		return nil, invalid("messages", "invalid_value", "messages must be a non-empty array")
	}
	out := make([]chatMessage, 0, len(msgs))
	for i, raw := range msgs {
		at := fmt.Sprintf("messages[%d]", i)
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
			return nil, invalid(at, "invalid_type", "%s must be an object with role and content", at)
		}
		if k, unknown, ok := textgen.CheckFields(fields, messageFields); !ok {
			if unknown {
				return nil, invalid(at+"."+k, "unknown_parameter", "Unrecognized message field supplied: %s.%s", at, k)
			}
			return nil, unsupported(at+"."+k, "%s.%s is not supported by this server", at, k)
		}
		var role string
		if err := json.Unmarshal(fields["role"], &role); err != nil {
			return nil, invalid(at+".role", "invalid_type", "%s.role must be a string", at)
		}
		switch role {
		case "system", "user", "assistant":
		case "developer":
			role = "system"
		case "tool", "function":
			return nil, unsupported(at+".role", "%s.role %q: tool and function messages are not supported by this server", at, role)
		default:
			return nil, invalid(at+".role", "invalid_value", "%s.role %q must be one of system, developer, user, assistant", at, role)
		}
		text, e := contentText(fields["content"], at+".content")
		if e != nil {
			return nil, e
		}
		out = append(out, chatMessage{Role: role, Content: text})
	}
	return out, nil
}

// contentText reads message content: a string, or an array of {"type":"text"} parts.
func contentText(raw json.RawMessage, at string) (string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", invalid(at, "missing_required_parameter", "%s is required", at)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid(at, "invalid_type", "%s must be a string or an array of content parts", at)
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		pat := fmt.Sprintf("%s[%d]", at, j)
		var typ string
		_ = json.Unmarshal(p["type"], &typ)
		if typ != "text" {
			return "", unsupported(pat+".type", "%s.type %q is not supported by this server: only text content is", pat, typ)
		}
		for k := range p {
			if k != "type" && k != "text" {
				return "", invalid(pat+"."+k, "unknown_parameter", "Unrecognized content part field supplied: %s.%s", pat, k)
			}
		}
		var t string
		if err := json.Unmarshal(p["text"], &t); err != nil {
			return "", invalid(pat+".text", "invalid_type", "%s.text must be a string", pat)
		}
		texts = append(texts, t)
	}
	return strings.Join(texts, "\n"), nil
}

// checkOptions refuses values of parsed chat fields we cannot honour.
func (c *chatRequest) checkOptions() *apiError {
	if rf := c.ResponseFormat; rf != nil && rf.Type != "" && rf.Type != "text" {
		return unsupported("response_format", "response_format type %q is not supported by this server: only text", rf.Type)
	}
	for _, m := range c.Modalities {
		if m != "text" {
			return unsupported("modalities", "modalities: %q is not supported by this server, only text", m)
		}
	}
	if t := c.ServiceTier; t != nil && *t != "auto" && *t != "default" {
		return unsupported("service_tier", "service_tier %q is not supported by this server: only auto and default", *t)
	}
	if tc := string(c.ToolChoice); tc != "" && tc != "null" && tc != `"none"` && tc != `"auto"` {
		// Without tools (which we refuse), "none" and "auto" both mean plain text.
		return unsupported("tool_choice", "tool_choice %s is not supported by this server: tools are not", tc)
	}
	if c.Store != nil && *c.Store {
		return unsupported("store", "store is not supported by this server: completions are not kept")
	}
	if c.MaxTokens != nil && c.MaxCompletionTokens != nil && *c.MaxTokens != *c.MaxCompletionTokens {
		return invalid("max_tokens", "invalid_value", "max_tokens and max_completion_tokens disagree; send only max_completion_tokens")
	}
	if c.TopLogprobs != nil {
		if *c.TopLogprobs < 0 || *c.TopLogprobs > 20 {
			return invalid("top_logprobs", "invalid_value", "top_logprobs %d must be between 0 and 20", *c.TopLogprobs)
		}
		if *c.TopLogprobs > 0 && (c.Logprobs == nil || !*c.Logprobs) {
			return invalid("top_logprobs", "invalid_value", "top_logprobs needs logprobs set to true")
		}
	}
	return nil
}

// completionRequest is POST /completions.
type completionRequest struct {
	sampling
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *int            `json:"max_tokens"`
	Logprobs  *int            `json:"logprobs"`
	Echo      *bool           `json:"echo"`
	BestOf    *int            `json:"best_of"`
}

// prompt is one prompt of a completions request: text, or tokens as given.
type prompt struct {
	text   string
	tokens []int32
	isText bool
}

// parsePrompt accepts a string, an array of strings, an array of token ids, or an array
// of arrays of token ids.
func parsePrompt(raw json.RawMessage, vocab int) ([]prompt, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, invalid("prompt", "missing_required_parameter", "you must provide a prompt parameter")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []prompt{{text: s, isText: true}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		return nil, invalid("prompt", "invalid_type", "prompt must be a string, an array of strings, an array of token ids, or an array of arrays of token ids (and not empty)")
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		toks, e := tokenIDs(ids, vocab, "prompt")
		if e != nil {
			return nil, e
		}
		return []prompt{{tokens: toks}}, nil
	}
	out := make([]prompt, 0, len(items))
	for i, it := range items {
		at := fmt.Sprintf("prompt[%d]", i)
		if json.Unmarshal(it, &s) == nil {
			out = append(out, prompt{text: s, isText: true})
			continue
		}
		if err := json.Unmarshal(it, &ids); err != nil || len(ids) == 0 {
			return nil, invalid(at, "invalid_type", "%s must be a string or a non-empty array of token ids", at)
		}
		toks, e := tokenIDs(ids, vocab, at)
		if e != nil {
			return nil, e
		}
		out = append(out, prompt{tokens: toks})
	}
	return out, nil
}

func tokenIDs(ids []int64, vocab int, at string) ([]int32, *apiError) {
	out := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= int64(vocab) {
			return nil, invalid(at, "invalid_value", "%s: token id %d at position %d is outside the vocabulary [0, %d)", at, id, i, vocab)
		}
		out[i] = int32(id)
	}
	return out, nil
}

func (c *completionRequest) checkOptions() *apiError {
	if c.BestOf != nil && *c.BestOf != 1 {
		return unsupported("best_of", "best_of %d is not supported by this server: only 1", *c.BestOf)
	}
	if c.Logprobs != nil && (*c.Logprobs < 0 || *c.Logprobs > 5) {
		return invalid("logprobs", "invalid_value", "logprobs %d must be between 0 and 5", *c.Logprobs)
	}
	if c.Echo != nil && *c.Echo && c.Logprobs != nil && c.stream() {
		return unsupported("echo", "echo with logprobs is not supported when streaming")
	}
	return nil
}
