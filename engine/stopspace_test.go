package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine/tokenizer"
)

// spaceStop finds, in a sampled sequence decoded by a SentencePiece tokenizer, a token
// whose text in context starts with the space its lone decoding drops, and returns the
// index of the first such token whose text is a stop string found nowhere in the
// concatenation of lone decodings (where matching token by token would look).
func spaceStop(tok *tokenizer.Tokenizer, toks []int32) (int, string) {
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
		if j > 0 && len(d) > 2 && d[0] == ' ' && d[1] != ' ' && tok.Decode([]int32{id}) == d[1:] &&
			!strings.Contains(before+d[:len(d)-1], d) && !strings.Contains(lone.String(), d) {
			return j, d
		}
	}
	return -1, ""
}

// With a Llama-2-style tokenizer (Replace ▁, ByteFallback, Fuse, Strip) a stop string
// that begins with the space of a ▁-prefixed token stops the sample at that token.
func TestSampleStopStringWithSentencePieceSpace(t *testing.T) {
	tok, err := tokenizer.Load("tokenizer/testdata/tokenizer_spm_legacy.json")
	if err != nil {
		t.Fatal(err)
	}
	m := tinyModel(t)
	m.Tok = tok
	m.Cfg.EOSTokenIDs = nil
	for seed := int64(1); seed <= 40; seed++ {
		req := SampleRequest{Prompt: []int32{40, 41, 42}, NumSamples: 1, Params: SampleParams{MaxTokens: 16, Temperature: 1, TopK: -1, TopP: 1, Seed: &seed}}
		free, err := m.Sample(context.Background(), nil, req)
		if err != nil {
			t.Fatal(err)
		}
		toks := free.Sequences[0].Tokens
		j, stop := spaceStop(tok, toks)
		if j < 0 {
			continue
		}
		req.Params.StopStrings = []string{stop}
		got, err := m.Sample(context.Background(), nil, req)
		if err != nil {
			t.Fatal(err)
		}
		g := got.Sequences[0]
		if len(g.Tokens) != j+1 || g.StopReason != StopReasonStop {
			t.Fatalf("stop %q: stopped after %d tokens (%s), want %d (stop); tokens %v", stop, len(g.Tokens), g.StopReason, j+1, toks)
		}
		return
	}
	t.Fatal("no seed sampled a ▁-prefixed token to stop at")
}
