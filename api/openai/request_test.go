package openai

import (
	"strings"
	"testing"

	"github.com/tuft-go/tuft/config"
)

var limits = config.Default("").Limits

// Every request either parses or gets a 400 naming the offending field.
func TestChatRequestValidation(t *testing.T) {
	t.Parallel()
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		body  string
		param string // "" = accepted
		code  string
	}{
		{`{"model":"m",` + msgs + `}`, "", ""},
		{`{"model":"m",` + msgs + `,"temperature":0,"top_p":0.5,"top_k":5,"n":3,"seed":1,"stop":["a","b"],"max_tokens":4}`, "", ""},
		{`{"model":"m",` + msgs + `,"logprobs":true,"top_logprobs":20,"stream":true,"stream_options":{"include_usage":true}}`, "", ""},
		{`{"model":"m",` + msgs + `,"user":"u","metadata":{"k":"v"},"safety_identifier":"s","prompt_cache_key":"p"}`, "", ""},
		{`{"model":"m",` + msgs + `,"frequency_penalty":0,"presence_penalty":0,"logit_bias":{},"tools":[],"tool_choice":"none"}`, "", ""},
		{`{"model":"m",` + msgs + `,"response_format":{"type":"text"},"modalities":["text"],"service_tier":"auto","store":false}`, "", ""},
		{`{"model":"m",` + msgs + `,"max_tokens":5,"max_completion_tokens":5,"parallel_tool_calls":null}`, "", ""},
		{`{"model":"m","messages":[{"role":"developer","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":"x","refusal":null,"tool_calls":[]},{"role":"user","content":"y"}]}`, "", ""},

		{`[]`, "", "invalid_json"},
		{`{"model":"m",` + msgs + `,`, "", "invalid_json"},
		{`{` + msgs + `}`, "model", "missing_required_parameter"},
		{`{"model":"m"}`, "messages", "invalid_value"},
		{`{"model":"m","messages":[]}`, "messages", "invalid_value"},
		{`{"model":"m",` + msgs + `,"bogus":1}`, "bogus", "unknown_parameter"},
		{`{"model":"m",` + msgs + `,"tools":[{"type":"function"}]}`, "tools", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"tool_choice":"required"}`, "tool_choice", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"logit_bias":{"5":1}}`, "logit_bias", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"frequency_penalty":0.5}`, "frequency_penalty", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"audio":{"voice":"x"}}`, "audio", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"response_format":{"type":"json_schema"}}`, "response_format", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"modalities":["text","audio"]}`, "modalities", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"store":true}`, "store", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"reasoning_effort":"low"}`, "reasoning_effort", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"temperature":2.5}`, "temperature", "invalid_value"},
		{`{"model":"m",` + msgs + `,"temperature":"hot"}`, "temperature", "invalid_type"},
		{`{"model":"m",` + msgs + `,"top_p":0}`, "top_p", "invalid_value"},
		{`{"model":"m",` + msgs + `,"top_k":-2}`, "top_k", "invalid_value"},
		{`{"model":"m",` + msgs + `,"n":0}`, "n", "invalid_value"},
		{`{"model":"m",` + msgs + `,"n":100000}`, "n", "invalid_value"},
		{`{"model":"m",` + msgs + `,"stop":""}`, "stop", "invalid_value"},
		{`{"model":"m",` + msgs + `,"stop":5}`, "stop", "invalid_type"},
		{`{"model":"m",` + msgs + `,"stop":["a",""]}`, "stop[1]", "invalid_value"},
		{`{"model":"m",` + msgs + `,"stop":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]}`, "stop", "invalid_value"},
		{`{"model":"m",` + msgs + `,"top_logprobs":3}`, "top_logprobs", "invalid_value"},
		{`{"model":"m",` + msgs + `,"logprobs":true,"top_logprobs":21}`, "top_logprobs", "invalid_value"},
		{`{"model":"m",` + msgs + `,"stream_options":{"include_usage":true}}`, "stream_options", "invalid_value"},
		{`{"model":"m",` + msgs + `,"max_tokens":5,"max_completion_tokens":6}`, "max_tokens", "invalid_value"},
		{`{"model":"m","messages":[{"role":"tool","content":"x"}]}`, "messages[0].role", "unsupported_parameter"},
		{`{"model":"m","messages":[{"role":"robot","content":"x"}]}`, "messages[0].role", "invalid_value"},
		{`{"model":"m","messages":[{"role":"user"}]}`, "messages[0].content", "missing_required_parameter"},
		{`{"model":"m","messages":[{"role":"user","content":"x","name":"bob"}]}`, "messages[0].name", "unsupported_parameter"},
		{`{"model":"m","messages":[{"role":"user","content":"x","colour":"red"}]}`, "messages[0].colour", "unknown_parameter"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, "messages[0].content[0].type", "unsupported_parameter"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x","extra":1}]}]}`, "messages[0].content[0].extra", "unknown_parameter"},
		{`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]}]}`, "messages[0].tool_calls", "unsupported_parameter"},
		{`{"model":"m","messages":["hi"]}`, "messages[0]", "invalid_type"},
	}
	for _, tc := range cases {
		_, e := checkChat([]byte(tc.body), limits)
		checkResult(t, tc.body, e, tc.param, tc.code)
	}
}

func TestCompletionRequestValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		body  string
		param string
		code  string
	}{
		{`{"model":"m","prompt":"hi"}`, "", ""},
		{`{"model":"m","prompt":["a","b"],"n":2,"logprobs":5,"echo":true,"best_of":1,"suffix":null,"user":"u"}`, "", ""},
		{`{"model":"m","prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":false}}`, "", ""},
		{`{"model":"m","prompt":"hi","suffix":"x"}`, "suffix", "unsupported_parameter"},
		{`{"model":"m","prompt":"hi","best_of":3}`, "best_of", "unsupported_parameter"},
		{`{"model":"m","prompt":"hi","logprobs":6}`, "logprobs", "invalid_value"},
		{`{"model":"m","prompt":"hi","logprobs":true}`, "logprobs", "invalid_type"},
		{`{"model":"m","prompt":"hi","echo":true,"logprobs":1,"stream":true}`, "echo", "unsupported_parameter"},
		{`{"model":"m","prompt":"hi","messages":[]}`, "messages", "unknown_parameter"},
		{`{"model":"m","prompt":"hi","max_completion_tokens":4}`, "max_completion_tokens", "unknown_parameter"},
	}
	for _, tc := range cases {
		_, e := checkCompletion([]byte(tc.body), limits)
		checkResult(t, tc.body, e, tc.param, tc.code)
	}
}

func TestPromptForms(t *testing.T) {
	t.Parallel()
	cases := []struct {
		raw   string
		n     int
		param string
	}{
		{`"text"`, 1, ""},
		{`["a","b","c"]`, 3, ""},
		{`[1,2,3]`, 1, ""},
		{`[[1,2],[3]]`, 2, ""},
		{`["a",[1,2]]`, 2, ""},
		{`null`, 0, "prompt"},
		{`[]`, 0, "prompt"},
		{`5`, 0, "prompt"},
		{`[1,-1]`, 0, "prompt"},
		{`[1,600]`, 0, "prompt"},
		{`[[1],[]]`, 0, "prompt[1]"},
		{`[[1],[700]]`, 0, "prompt[1]"},
		{`[{"x":1}]`, 0, "prompt[0]"},
	}
	for _, tc := range cases {
		ps, e := parsePrompt([]byte(tc.raw), 512)
		if tc.param == "" {
			if e != nil || len(ps) != tc.n {
				t.Errorf("%s: %d prompts, error %v; want %d", tc.raw, len(ps), e, tc.n)
			}
			continue
		}
		if e == nil || e.Param != tc.param {
			t.Errorf("%s: error %+v, want one naming %s", tc.raw, e, tc.param)
		}
	}
}

func TestMaxTokens(t *testing.T) {
	t.Parallel()
	lim := limits
	lim.MaxSampleTokens = 100
	v := func(n int) *int { return &n }
	cases := []struct {
		v           *int
		def, prompt int
		ctx         int
		want        int
		code        string
	}{
		{nil, 0, 10, 50, 40, ""},    // as much as the context allows
		{nil, 0, 10, 1000, 100, ""}, // capped by limits.max_sample_tokens
		{nil, 16, 10, 1000, 16, ""}, // the route's default
		{nil, 16, 45, 50, 5, ""},    // the default, shortened to fit
		{v(20), 0, 10, 50, 20, ""},
		{v(41), 0, 10, 50, 0, "context_length_exceeded"},
		{v(101), 0, 10, 1000, 0, "invalid_value"},
		{v(0), 0, 10, 50, 0, "invalid_value"},
		{nil, 0, 50, 50, 0, "context_length_exceeded"},
	}
	for i, tc := range cases {
		got, e := maxTokens("max_tokens", tc.v, tc.def, tc.prompt, tc.ctx, lim)
		if tc.code == "" && (e != nil || got != tc.want) {
			t.Errorf("case %d: %d, %v; want %d", i, got, e, tc.want)
		}
		if tc.code != "" && (e == nil || e.Code != tc.code) {
			t.Errorf("case %d: error %+v, want code %s", i, e, tc.code)
		}
	}
}

func checkResult(t *testing.T, body string, e *apiError, param, code string) {
	t.Helper()
	if param == "" && code == "" {
		if e != nil {
			t.Errorf("%s: refused: %s", body, e.Message)
		}
		return
	}
	if e == nil {
		t.Errorf("%s: accepted, want a 400 naming %q", body, param)
		return
	}
	if e.Status != 400 || e.Param != param || e.Code != code || e.Type != "invalid_request_error" {
		t.Errorf("%s: got %d param %q code %q type %q (%s); want 400 param %q code %q", body, e.Status, e.Param, e.Code, e.Type, e.Message, param, code)
	}
	if param != "" && !strings.Contains(e.Message, strings.Split(param, "[")[0]) {
		t.Errorf("%s: message %q does not name %s", body, e.Message, param)
	}
}
