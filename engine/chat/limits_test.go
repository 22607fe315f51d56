package chat

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func twoByteMessages(n int) []Message {
	m := make([]Message, n)
	for i := range m {
		m[i] = Message{Role: "user", Content: "hi"}
	}
	return m
}

// A conversation over the message or byte bound is refused before rendering starts,
// with a LimitError naming the bound.
func TestRenderRefusesOverLimitsBeforeStarting(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(chatMLTemplate)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		lim      Limits
		msgs     []Message
		limit    string
		max, got int64
	}{
		{Limits{MaxMessages: 3}, twoByteMessages(4), LimitMessages, 3, 4},
		{Limits{MaxBytes: 20}, []Message{{Role: "user", Content: strings.Repeat("x", 17)}}, LimitBytes, 20, 21},
		{Limits{MaxOutputBytes: 100}, twoByteMessages(50), LimitOutput, 100, 0},
	}
	for _, c := range cases {
		_, err := tpl.Render(context.Background(), c.msgs, Options{Limits: c.lim})
		var le *LimitError
		if !errors.As(err, &le) || !errors.Is(err, ErrLimit) || le.Limit != c.limit || le.Max != c.max || (c.got > 0 && le.Got != c.got) {
			t.Fatalf("%+v: %v, want a LimitError %s %d/%d", c.lim, err, c.limit, c.got, c.max)
		}
		if c.limit == LimitOutput && (le.Got <= 100 || le.Got > 200) {
			t.Fatalf("the output bound stopped the render at %d bytes, want just past 100", le.Got)
		}
	}
	// At the bounds, it renders.
	out, err := tpl.Render(context.Background(), twoByteMessages(3), Options{Limits: Limits{MaxMessages: 3, MaxBytes: 18, MaxOutputBytes: 3 * 30}})
	if err != nil || len(out) != 3*30 {
		t.Fatalf("at the bounds: %q, %v", out, err)
	}
}

// An ended context stops the render (the request's client hung up).
func TestRenderStopsWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(chatMLTemplate)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tpl.Render(ctx, twoByteMessages(10), Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context: %v", err)
	}
	// Cancelled halfway: the rest is not rendered.
	ctx, cancel = context.WithCancel(context.Background())
	calls := 0
	raise := func(string) string { // a template function that ends the context at the 100th message
		if calls++; calls == 100 {
			cancel()
		}
		return ""
	}
	slow, err := Parse(`{% for m in messages %}{{ tick(m.content) }}{{ m.content }}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slow.Render(ctx, twoByteMessages(100000), Options{Extra: map[string]any{"tick": raise}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled halfway: %v", err)
	}
	if calls > 101 {
		t.Fatalf("the render went on for %d messages after its context ended", calls-100)
	}
}

func timeRender(t *testing.T, tpl *Template, msgs []Message) time.Duration {
	t.Helper()
	best := time.Duration(1 << 62)
	for range 3 { // the best of three: other processes share the machine
		t0 := time.Now()
		if _, err := tpl.Render(context.Background(), msgs, Options{AddGenerationPrompt: true}); err != nil {
			t.Fatal(err)
		}
		best = min(best, time.Since(t0))
	}
	return best
}

// Rendering time grows linearly with the messages: 5× the messages take about 5× as long
// (a quadratic cost would take 25×; the bound is generous for a shared machine). The
// tokenizer's half of the same pipeline is TestEncodeIsLinearInAddedTokens.
func TestRenderIsLinearInMessages(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("times renders of 50,000 messages")
	}
	tpl, err := Parse(qwenTemplate)
	if err != nil {
		t.Fatal(err)
	}
	small, large := timeRender(t, tpl, twoByteMessages(10000)), timeRender(t, tpl, twoByteMessages(50000))
	ratio := float64(large) / float64(small)
	t.Logf("render: 10,000 messages %s, 50,000 messages %s, ratio %.1f", small, large, ratio)
	if ratio > 10 {
		t.Fatalf("rendering 5× the messages took %.1f× as long (want about 5, linear)", ratio)
	}
}

func BenchmarkRender10kMessages(b *testing.B) {
	tpl, err := Parse(qwenTemplate)
	if err != nil {
		b.Fatal(err)
	}
	msgs := twoByteMessages(10000)
	for b.Loop() {
		if _, err := tpl.Render(context.Background(), msgs, Options{AddGenerationPrompt: true}); err != nil {
			b.Fatal(err)
		}
	}
}
