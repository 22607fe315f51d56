package openai_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
)

// /chat/render shows the prompt /chat/completions generates from: the same text, the same
// token count, and the same refusals, without generating.
func TestChatRenderMatchesCompletionPrompt(t *testing.T) {
	t.Parallel()
	s, _ := start(t, nil, nil)
	msgs := []map[string]any{{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello <b>there</b>"}}
	resp, body := post(t, s, "/oai/api/v1/chat/render", testenv.KeyA, map[string]any{"model": testenv.Model, "messages": msgs, "temperature": 0.5})
	if resp.StatusCode != 200 {
		t.Fatalf("render: %d %s", resp.StatusCode, body)
	}
	var r struct {
		Model        string `json:"model"`
		Prompt       string `json:"prompt"`
		PromptTokens int    `json:"prompt_tokens"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	if r.Model != testenv.Model || !strings.Contains(r.Prompt, "hello <b>there</b>") || !strings.Contains(r.Prompt, "be brief") || r.PromptTokens <= 0 {
		t.Fatalf("render answered %+v", r)
	}
	resp, body = post(t, s, "/oai/api/v1/chat/completions", testenv.KeyA, map[string]any{"model": testenv.Model, "messages": msgs, "max_tokens": 1, "temperature": 0})
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	var c struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	if c.Usage.PromptTokens != r.PromptTokens {
		t.Fatalf("render counts %d prompt tokens, the completion %d", r.PromptTokens, c.Usage.PromptTokens)
	}

	for _, tc := range []struct {
		name string
		body map[string]any
		code int
		want string
	}{
		{"unknown field", map[string]any{"model": testenv.Model, "messages": msgs, "bogus": 1}, 400, "bogus"},
		{"no such model", map[string]any{"model": "nope/nope", "messages": msgs}, 404, "nope/nope"},
		{"another tenant's checkpoint", map[string]any{"model": "tinker://run-of-someone/sampler_weights/x", "messages": msgs}, 404, ""},
	} {
		resp, body := post(t, s, "/oai/api/v1/chat/render", testenv.KeyB, tc.body)
		if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s: %d %s, want %d naming %q", tc.name, resp.StatusCode, body, tc.code, tc.want)
		}
	}
	if resp, _ := post(t, s, "/oai/api/v1/chat/render", "", map[string]any{"model": testenv.Model, "messages": msgs}); resp.StatusCode != 401 {
		t.Fatalf("render without a key: %d", resp.StatusCode)
	}
}
