package openai

import (
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/internal/testenv/check"
)

// Two choices of a generation, as the text pieces arrive: choice 1 ends on a stop string.
func pieces() []textgen.Piece {
	tok := func(id int32, text string, lp float32, off int) textgen.Token {
		return textgen.Token{ID: id, Text: text, Logprob: lp, Offset: off,
			Top: []textgen.Alt{{ID: id, Text: text, Logprob: lp}, {ID: 99, Text: "é", Logprob: -3.5}}}
	}
	return []textgen.Piece{
		{Choice: 0, Text: "Hello", Tokens: []textgen.Token{tok(1, "Hello", -0.25, 0)}},
		{Choice: 1, Text: "Bon", Tokens: []textgen.Token{tok(2, "Bon", -0.5, 0)}},
		{Choice: 0, Text: " world", Tokens: []textgen.Token{tok(3, " world", -1, 5)}},
		{Choice: 1, Text: "jour", Tokens: []textgen.Token{tok(4, "jour", -0.125, 3)}, Finish: "stop", StopSequence: "!"},
		{Choice: 0, Text: "", Finish: "length"},
	}
}

var summary = textgen.Summary{PromptTokens: 7, CompletionTokens: 5, RequestIDs: []string{"req_1"}}

func TestChatStreamFraming(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		logprobs, usage bool
	}{{"chat_stream.sse", false, true}, {"chat_stream_logprobs.sse", true, false}} {
		rec := httptest.NewRecorder()
		cw := &chatWriter{w: rec, sse: textgen.NewSSE(rec), usage: tc.usage, respID: "chatcmpl-test", created: 1700000000,
			model: "tuft/tiny", logprobs: tc.logprobs, n: 2, collect: textgen.NewCollect(2)}
		for _, p := range pieces() {
			if err := cw.piece(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := cw.done(summary); err != nil {
			t.Fatal(err)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
			t.Errorf("content type %q", ct)
		}
		check.Golden(t, filepath.Join("testdata", tc.name), rec.Body.Bytes())
	}
}

func TestChatWholeResponse(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	cw := &chatWriter{w: rec, respID: "chatcmpl-test", created: 1700000000, model: "tuft/tiny", logprobs: true, n: 2, collect: textgen.NewCollect(2)}
	for _, p := range pieces() {
		_ = cw.piece(p)
	}
	_ = cw.done(summary)
	check.Golden(t, filepath.Join("testdata", "chat.json"), rec.Body.Bytes())
}

func TestCompletionFraming(t *testing.T) {
	t.Parallel()
	req := textgen.Request{N: 2, Prompts: [][]int32{{5, 6}}, TopLogprobs: 2, Params: engine.SampleParams{MaxTokens: 3}}
	rec := httptest.NewRecorder()
	cw := &completionWriter{w: rec, sse: textgen.NewSSE(rec), usage: true, respID: "cmpl-test", created: 1700000000, model: "tuft/tiny",
		logprobs: true, echo: true, n: 2, prompts: []string{"Say: "}, req: req, collect: textgen.NewCollect(2), echoed: make([]bool, 2)}
	for _, p := range pieces() {
		if err := cw.piece(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := cw.done(summary); err != nil {
		t.Fatal(err)
	}
	check.Golden(t, filepath.Join("testdata", "completion_stream.sse"), rec.Body.Bytes())

	rec = httptest.NewRecorder()
	cw = &completionWriter{w: rec, respID: "cmpl-test", created: 1700000000, model: "tuft/tiny", logprobs: true, n: 2,
		prompts: []string{"Say: "}, req: req, collect: textgen.NewCollect(2)}
	for _, p := range pieces() {
		_ = cw.piece(p)
	}
	_ = cw.done(summary)
	check.Golden(t, filepath.Join("testdata", "completion.json"), rec.Body.Bytes())
}

// An error after the stream began is an error event, then the stream ends.
func TestStreamErrorEvent(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	cw := &chatWriter{w: rec, sse: textgen.NewSSE(rec), respID: "chatcmpl-test", created: 1700000000, model: "tuft/tiny", n: 1, collect: textgen.NewCollect(1)}
	_ = cw.piece(textgen.Piece{Choice: 0, Text: "Hi"})
	cw.fail(toAPIError(&apiError{Status: 500, Type: "server_error", Message: "the worker went away"}))
	check.Golden(t, filepath.Join("testdata", "chat_stream_error.sse"), rec.Body.Bytes())
}
