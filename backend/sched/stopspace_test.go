package sched

import (
	"context"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/tokenizer"
)

// With a Llama-2-style tokenizer the scheduler matches a stop string that begins with
// the space of a ▁-prefixed token (the space a lone decoding of the token drops).
func TestSchedulerStopStringWithSentencePieceSpace(t *testing.T) {
	tok, err := tokenizer.Load("../../engine/tokenizer/testdata/tokenizer_spm_legacy.json")
	if err != nil {
		t.Fatal(err)
	}
	l, m := schedLocal(t, Config{})
	m.Tok = tok
	for seed := int64(1); seed <= 40; seed++ {
		req := seeded(prompt(5, 1), 1, 16, 1, seed)
		free, err := l.Sample(context.Background(), "tiny", "", req)
		if err != nil {
			t.Fatal(err)
		}
		toks := free.Sequences[0].Tokens
		var lone strings.Builder
		for _, id := range toks {
			lone.WriteString(tok.Decode([]int32{id}))
		}
		s := tokenizer.NewStream(tok)
		var text strings.Builder
		for j, id := range toks {
			d := s.Next(id)
			before := text.String()
			text.WriteString(d)
			if j == 0 || len(d) < 3 || d[0] != ' ' || d[1] == ' ' || tok.Decode([]int32{id}) != d[1:] ||
				strings.Contains(before+d[:len(d)-1], d) || strings.Contains(lone.String(), d) {
				continue
			}
			req.Params.StopStrings = []string{d}
			got, err := l.Sample(context.Background(), "tiny", "", req)
			if err != nil {
				t.Fatal(err)
			}
			if g := got.Sequences[0]; len(g.Tokens) != j+1 || g.StopReason != engine.StopReasonStop {
				t.Fatalf("stop %q: stopped after %d tokens (%s), want %d (stop); tokens %v", d, len(g.Tokens), g.StopReason, j+1, toks)
			}
			return
		}
	}
	t.Fatal("no seed sampled a ▁-prefixed token to stop at")
}

// The scheduler matches stop strings on the continuation of the prompt's text: one that
// begins with the space of the first sampled token (" Paris" after "The capital is")
// stops the sample there.
func TestSchedulerStopStringAtFirstTokenAfterPrompt(t *testing.T) {
	tok, err := tokenizer.Load("../../engine/tokenizer/testdata/tokenizer_spm_legacy.json")
	if err != nil {
		t.Fatal(err)
	}
	l, m := schedLocal(t, Config{})
	m.Tok = tok
	for seed := int64(1); seed <= 60; seed++ {
		req := seeded(prompt(5, 1), 1, 8, 1, seed)
		free, err := l.Sample(context.Background(), "tiny", "", req)
		if err != nil {
			t.Fatal(err)
		}
		toks := free.Sequences[0].Tokens
		if len(toks) == 0 {
			continue
		}
		d := tokenizer.NewStreamAfter(tok, req.Prompt).Next(toks[0])
		if len(d) < 3 || d[0] != ' ' || d[1] == ' ' || strings.Contains(tok.Decode(toks), d) {
			continue // decoded on its own the text has it too: this seed shows nothing
		}
		req.Params.StopStrings = []string{d}
		got, err := l.Sample(context.Background(), "tiny", "", req)
		if err != nil {
			t.Fatal(err)
		}
		if g := got.Sequences[0]; len(g.Tokens) != 1 || g.StopReason != engine.StopReasonStop {
			t.Fatalf("stop %q: stopped after %d tokens (%s), want 1 (stop); tokens %v", d, len(g.Tokens), g.StopReason, toks)
		}
		return
	}
	t.Fatal("no seed sampled a ▁-prefixed first token")
}
