package anthropic

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/internal/testenv/check"
)

var pieces = []textgen.Piece{
	{Text: "Hello", Tokens: []textgen.Token{{ID: 1, Text: "Hello"}}},
	{Text: "", Tokens: []textgen.Token{{ID: 2, Text: "\xc3"}}},
	{Text: " wörld", Tokens: []textgen.Token{{ID: 3, Text: "\xb6rld"}}},
	{Finish: "stop", StopSequence: "\n\nHuman:"},
}

func TestMessageStreamFraming(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	mw := &messageWriter{w: rec, sse: textgen.NewSSE(rec), id: "msg_test", model: "tuft/tiny", inputTokens: 9, collect: textgen.NewCollect(1)}
	for _, p := range pieces {
		if err := mw.piece(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.done(textgen.Summary{PromptTokens: 9, CompletionTokens: 4}); err != nil {
		t.Fatal(err)
	}
	check.Golden(t, filepath.Join("testdata", "messages_stream.sse"), rec.Body.Bytes())
}

func TestMessageWholeResponse(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	mw := &messageWriter{w: rec, id: "msg_test", model: "tuft/tiny", inputTokens: 9, collect: textgen.NewCollect(1)}
	for _, p := range pieces {
		_ = mw.piece(p)
	}
	_ = mw.done(textgen.Summary{PromptTokens: 9, CompletionTokens: 4})
	check.Golden(t, filepath.Join("testdata", "message.json"), rec.Body.Bytes())
}

func TestStopReason(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ finish, seq, want string }{
		{"stop", "", "end_turn"}, {"stop", "END", "stop_sequence"}, {"length", "", "max_tokens"},
	} {
		if got := stopReason(tc.finish, tc.seq); got != tc.want {
			t.Errorf("stopReason(%q, %q) = %q, want %q", tc.finish, tc.seq, got, tc.want)
		}
	}
}

// Requests that never reach a model: each gets a 400 naming the field.
func TestMessagesRequestValidation(t *testing.T) {
	t.Parallel()
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		body, field string
	}{
		{`{"model":"m","max_tokens":5,` + msgs + `,"bogus":1}`, "bogus"},
		{`{"model":"m","max_tokens":5,` + msgs + `,"tools":[{"name":"f"}]}`, "tools"},
		{`{"model":"m","max_tokens":5,` + msgs + `,"output_config":{"format":{"type":"json_schema"}}}`, "output_config"},
		{`{"model":"m","max_tokens":5,` + msgs + `,"thinking":{"type":"enabled","budget_tokens":2048}}`, "thinking"},
		{`{"model":"m","max_tokens":5,` + msgs + `,"tool_choice":{"type":"any"}}`, "tool_choice"},
		{`{"model":"m","max_tokens":5,` + msgs + `,"speed":"fast"}`, "speed"},
		{`{"model":"m","max_tokens":5,` + msgs + `,"temperature":"x"}`, "temperature"},
	}
	for _, tc := range cases {
		var m messagesRequest
		e := decode([]byte(tc.body), messageRequestFields, &m)
		if e == nil {
			e = m.checkOptions()
		}
		if e == nil || e.Status != 400 || e.Type != "invalid_request_error" || !strings.Contains(e.Message, tc.field) {
			t.Errorf("%s: got %+v, want a 400 naming %s", tc.body, e, tc.field)
		}
	}
	ok := `{"model":"m","max_tokens":5,` + msgs + `,"metadata":{"user_id":"u"},"cache_control":{"type":"ephemeral"},"thinking":{"type":"disabled"},"tool_choice":{"type":"none"},"tools":[],"service_tier":"auto","speed":"standard","stop_sequences":["x"],"top_k":3}`
	var m messagesRequest
	if e := decode([]byte(ok), messageRequestFields, &m); e != nil {
		t.Fatalf("refused: %v", e)
	}
	if e := m.checkOptions(); e != nil {
		t.Fatalf("refused: %v", e)
	}
	for _, tc := range []struct{ content, field string }{
		{`[{"type":"image","source":{}}]`, "messages.0.content.0.type"},
		{`[{"type":"text","text":"a","citations":[{"x":1}]}]`, "messages.0.content.0.citations"},
		{`[{"type":"text","text":"a","extra":1}]`, "messages.0.content.0.extra"},
		{`[{"type":"text","text":5}]`, "messages.0.content.0.text"},
		{`7`, "messages.0.content"},
	} {
		_, e := blocksText([]byte(tc.content), "messages.0.content")
		if e == nil || !strings.Contains(e.Message, tc.field) {
			t.Errorf("%s: got %+v, want an error naming %s", tc.content, e, tc.field)
		}
	}
	if s, e := blocksText([]byte(`[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b"}]`), "system"); e != nil || s != "a\nb" {
		t.Errorf("text blocks: %q, %v", s, e)
	}
}
