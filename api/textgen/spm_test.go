package textgen

import (
	"testing"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/tokenizer"
)

// spmCodec is a Llama-2-style tokenizer (▁ for spaces, the first token's space
// stripped) whose end of sequence is </s>.
type spmCodec struct{ *tokenizer.Tokenizer }

func (c spmCodec) IsEOS(id int32) bool { id2, _ := c.TokenID("</s>"); return id == id2 }

// With a SentencePiece tokenizer each token's text is what it adds to the sequence's
// (its space kept), so the text, the tokens' texts and offsets, the alternatives' texts
// and stop strings that begin with a space all agree with Decode of the whole sequence.
func TestChoiceWithSentencePieceTokenizer(t *testing.T) {
	t.Parallel()
	tok, err := tokenizer.Load("../../engine/tokenizer/testdata/tokenizer_spm_legacy.json")
	if err != nil {
		t.Fatal(err)
	}
	codec := spmCodec{tok}
	ids, err := tok.EncodeOrdinary("Hello world, the end")
	if err != nil {
		t.Fatal(err)
	}
	run := func(stops []string) Collected {
		c := &choice{t: codec, stops: stops}
		all := NewCollect(1)
		for i, id := range ids {
			ev := engine.TokenEvent{Token: id, Logprob: -1, Top: []engine.TokenLogprob{{Token: id, Logprob: -1}}}
			if i == len(ids)-1 {
				ev.Stop = engine.StopReasonLength
			}
			if p, ok := c.add(ev); ok {
				all.Add(p)
			}
		}
		return all[0]
	}
	whole := run(nil)
	if got := whole.Text.String(); got != "Hello world, the end" {
		t.Fatalf("text %q", got)
	}
	for i, tk := range whole.Tokens {
		if want := tok.Decode(ids[:i+1])[tk.Offset:]; tk.Text != want || tk.Top[0].Text != want {
			t.Errorf("token %d: text %q, alternative %q; the sequence adds %q", i, tk.Text, tk.Top[0].Text, want)
		}
	}
	cut := run([]string{" the"})
	if got := cut.Text.String(); got != "Hello world," || cut.StopSequence != " the" {
		t.Fatalf("with stop \" the\": text %q, stop sequence %q", got, cut.StopSequence)
	}
}

// A choice's text continues its prompt's: after "Hello" the first token "▁world" reads
// " world" (decoded on its own it would be "world"), and a stop string " world" ends the
// text at that first token.
func TestChoiceContinuesThePrompt(t *testing.T) {
	t.Parallel()
	tok, err := tokenizer.Load("../../engine/tokenizer/testdata/tokenizer_spm_legacy.json")
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := tok.EncodeOrdinary("Hello")
	if err != nil {
		t.Fatal(err)
	}
	all, err := tok.EncodeOrdinary("Hello world, the end")
	if err != nil {
		t.Fatal(err)
	}
	gen := all[len(prompt):]
	run := func(stops []string) Collected {
		c := &choice{t: spmCodec{tok}, stops: stops, prompt: prompt}
		got := NewCollect(1)
		for i, id := range gen {
			ev := engine.TokenEvent{Token: id, Logprob: -1, Top: []engine.TokenLogprob{{Token: id, Logprob: -1}}}
			if i == len(gen)-1 {
				ev.Stop = engine.StopReasonLength
			}
			if p, ok := c.add(ev); ok {
				got.Add(p)
			}
		}
		return got[0]
	}
	whole := run(nil)
	if got := whole.Text.String(); got != " world, the end" {
		t.Fatalf("text %q", got)
	}
	if tk := whole.Tokens[0]; tk.Text != " world" || tk.Top[0].Text != " world" {
		t.Fatalf("first token %q, alternative %q", tk.Text, tk.Top[0].Text)
	}
	cut := run([]string{" world"})
	if got := cut.Text.String(); got != "" || cut.StopSequence != " world" || cut.Finish != "stop" {
		t.Fatalf("with stop \" world\": text %q, stop sequence %q, finish %q", got, cut.StopSequence, cut.Finish)
	}
}
