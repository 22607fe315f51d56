package tokenizer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// chatText is what a chat template renders for n two-byte messages: many added tokens
// close together, the input that made encoding quadratic (issue 22).
func chatText(n int) string { return strings.Repeat("<|im_start|>user\nhi<|im_end|>\n", n) }

func timeEncode(t *testing.T, tok *Tokenizer, text string) time.Duration {
	t.Helper()
	best := time.Duration(1 << 62)
	for range 3 { // the best of three: other processes share the machine
		t0 := time.Now()
		if _, err := tok.Encode(text); err != nil {
			t.Fatal(err)
		}
		best = min(best, time.Since(t0))
	}
	return best
}

// Encoding time grows linearly with the number of added tokens in the text: 5× the
// messages take about 5× as long (quadratic took 25×; the bound is generous for a
// shared machine).
func TestEncodeIsLinearInAddedTokens(t *testing.T) {
	t.Parallel()
	tok, err := Load("testdata/tokenizer_qwen2.json")
	if err != nil {
		t.Fatal(err)
	}
	small, large := timeEncode(t, tok, chatText(10000)), timeEncode(t, tok, chatText(50000))
	ratio := float64(large) / float64(small)
	t.Logf("encode: 10,000 messages %s, 50,000 messages %s, ratio %.1f", small, large, ratio)
	if ratio > 10 {
		t.Fatalf("encoding 5× the messages took %.1f× as long (want about 5, linear)", ratio)
	}
}

// The segmentation at added tokens is the same as searching the whole rest of the text
// each time (the quadratic way this replaced), overlaps and adjacent tokens included.
func TestEncodeAddedTokensMatchesNaiveSplit(t *testing.T) {
	t.Parallel()
	tok, err := Load("testdata/tokenizer_qwen2.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"", "<|im_start|><|im_start|>", "<|im_end|>x<|endoftext|><|im_start|>", "a<|im_start|", "<|im_<|im_end|>",
		chatText(3) + "tail", "<|endoftext|>" + chatText(2) + "<|endoftext|>"} {
		got, err := tok.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		var want []int32
		rest := s
		for len(rest) > 0 {
			pos, a := len(rest), AddedToken{}
			for _, c := range tok.added {
				if i := strings.Index(rest, c.Content); i >= 0 && i < pos {
					pos, a = i, c
				}
			}
			ids, err := tok.EncodeOrdinary(rest[:pos])
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, ids...)
			if a.Content == "" {
				break
			}
			want = append(want, a.ID)
			rest = rest[pos+len(a.Content):]
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %v, want %v", s, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%q: %v, want %v", s, got, want)
			}
		}
	}
}

func TestEncodeContextStopsAtTheLimitAndOnCancel(t *testing.T) {
	t.Parallel()
	tok, err := Load("testdata/tokenizer_qwen2.json")
	if err != nil {
		t.Fatal(err)
	}
	text := chatText(1000)
	all, err := tok.Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := tok.EncodeContext(context.Background(), text, len(all)); err != nil || len(ids) != len(all) {
		t.Fatalf("at the limit: %d tokens, %v (want %d)", len(ids), err, len(all))
	}
	for _, limit := range []int{len(all) - 1, 5, 1} {
		if _, err := tok.EncodeContext(context.Background(), text, limit); !errors.Is(err, ErrTooManyTokens) {
			t.Fatalf("limit %d of %d tokens: %v, want ErrTooManyTokens", limit, len(all), err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tok.EncodeContext(ctx, text, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context: %v", err)
	}
	if _, err := tok.EncodeContext(ctx, strings.Repeat("word ", 100000), 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context, one long segment: %v", err)
	}
}

// No token stands for more text than MaxTokenBytes: a text's length divided by it is at
// most its token count.
func TestMaxTokenBytesBoundsTokens(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"testdata/tokenizer_tiny.json", "testdata/tokenizer_qwen2.json", "testdata/tokenizer_llama3.json"} {
		tok, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		m := tok.MaxTokenBytes()
		if m <= 0 {
			t.Fatalf("%s: MaxTokenBytes %d", f, m)
		}
		for _, s := range []string{chatText(50), strings.Repeat("=", 4000), strings.Repeat(" ", 3000), "hello world, this is text"} {
			ids, err := tok.Encode(s)
			if err != nil {
				t.Fatal(err)
			}
			if len(s) > len(ids)*m {
				t.Fatalf("%s: %d bytes in %d tokens, more than %d per token", f, len(s), len(ids), m)
			}
		}
		t.Logf("%s: at most %d bytes per token", f, m)
	}
}
