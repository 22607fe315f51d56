package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine"
)

func TestModelRender(t *testing.T) {
	dir := t.TempDir()
	if err := engine.WritePreset("tiny", dir); err != nil {
		t.Fatal(err)
	}
	msgs := `[{"role":"user","content":"What is 4 + 5?"},{"role":"assistant","content":"9"}]`
	for _, tc := range []struct {
		gen  bool
		want string
	}{
		{false, "<|im_start|>user\nWhat is 4 + 5?<|im_end|>\n<|im_start|>assistant\n9<|im_end|>\n"},
		{true, "<|im_start|>user\nWhat is 4 + 5?<|im_end|>\n<|im_start|>assistant\n9<|im_end|>\n<|im_start|>assistant\n"},
	} {
		args := []string{"--model", dir}
		if tc.gen {
			args = append(args, "--generation-prompt")
		}
		var out bytes.Buffer
		if err := cmdModelRender(args, strings.NewReader(msgs), &out); err != nil {
			t.Fatal(err)
		}
		var got renderOutput
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if got.Text != tc.want {
			t.Errorf("generation prompt %v: text %q, want %q", tc.gen, got.Text, tc.want)
		}
		m, err := engine.Load(dir, "tiny")
		if err != nil {
			t.Fatal(err)
		}
		if dec := m.Tok.Decode(got.Tokens); dec != tc.want {
			t.Errorf("tokens decode to %q, want %q", dec, tc.want)
		}
		// The special markers are single tokens, not spelled out byte by byte.
		start, err := m.Tok.Encode("<|im_start|>")
		if err != nil || len(start) != 1 {
			t.Fatalf("<|im_start|> encodes to %v (%v), want one token", start, err)
		}
		if got.Tokens[0] != start[0] {
			t.Errorf("first token %d, want <|im_start|> (%d)", got.Tokens[0], start[0])
		}
	}
}

func TestModelRenderRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	if err := engine.WritePreset("tiny", dir); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		in   string
		want string
	}{
		"no model":      {nil, `[]`, "--model is required"},
		"not json":      {[]string{"--model", dir}, `hello`, "read messages"},
		"unknown field": {[]string{"--model", dir}, `[{"role":"user","text":"x"}]`, "unknown field"},
		"missing dir":   {[]string{"--model", dir + "/nope"}, `[]`, "nope"},
	} {
		err := cmdModelRender(tc.args, strings.NewReader(tc.in), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
}
