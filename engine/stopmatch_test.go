package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// The matcher finds exactly what a search of the whole text after every piece finds,
// whatever the pieces (tokens) the text arrives in.
func TestStopMatcherAgreesWithSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "abc"[rng.IntN(3)]
		}
		return string(b)
	}
	for trial := 0; trial < 300; trial++ {
		stops := make([]string, 1+rng.IntN(6))
		for i := range stops {
			stops[i] = word(1 + rng.IntN(5))
		}
		m := NewStopMatcher(stops)
		var st StopState
		text := ""
		for piece := 0; piece < 20; piece++ {
			p := word(rng.IntN(4))
			before := containsAny(text, stops)
			text += p
			var hit bool
			st, hit = m.Feed(st, p)
			want := !before && containsAny(text, stops)
			if before {
				break // a sampler stops at the first hit
			}
			if hit != want {
				t.Fatalf("stops %q, text %q (last piece %q): matcher says %v, search says %v", stops, text, p, hit, want)
			}
		}
	}
	if NewStopMatcher(nil) != nil || NewStopMatcher([]string{""}) != nil {
		t.Fatal("a matcher with nothing to match")
	}
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// With 20,000 stop strings the work per fed byte stays bounded: the automaton makes at
// most two edge lookups per byte on average, as with one stop string.
func TestStopMatcherWorkIsBoundedPerByte(t *testing.T) {
	stops := make([]string, 20000)
	for i := range stops {
		// Long strings sharing prefixes with the text, the costly case for naive search.
		stops[i] = fmt.Sprintf("the quick brown fox %05d jumps", i)
	}
	m := NewStopMatcher(stops)
	text := strings.Repeat("the quick brown fox 0000 the quick brown fox 1234 jump ", 200)
	var st StopState
	total, bytes := 0, 0
	for i := 0; i < len(text); i += 3 {
		piece := text[i:min(i+3, len(text))]
		var hit bool
		var steps int
		st, hit, steps = m.feed(st, piece)
		if hit {
			t.Fatalf("false match at %d", i)
		}
		total += steps
		bytes += len(piece)
	}
	if total > 2*bytes {
		t.Fatalf("%d edge lookups for %d bytes: more than two per byte", total, bytes)
	}
	_, hit := m.Feed(st, "the quick brown fox 12345 jumps")
	if !hit {
		t.Fatal("a stop string went unmatched")
	}
	t.Logf("%d stop strings: %d automaton states, %.2f lookups per byte", len(stops), m.States(), float64(total)/float64(bytes))
}

// Sample stops at a stop string found in the text of the new tokens only.
func TestSampleStopsAtStopString(t *testing.T) {
	m := tinyModel(t)
	if m.Tok == nil {
		t.Skip("no tokenizer")
	}
	seed := int64(3)
	req := SampleRequest{Prompt: []int32{40, 41, 42}, NumSamples: 2, Params: SampleParams{MaxTokens: 12, Temperature: 1, TopK: -1, TopP: 1, Seed: &seed}}
	m.Cfg.EOSTokenIDs = nil
	free, err := m.Sample(context.Background(), nil, req)
	if err != nil {
		t.Fatal(err)
	}
	// Stop at the text of the third token of sample 0, with many decoys.
	sq := free.Sequences[0]
	if len(sq.Tokens) < 4 {
		t.Skip("sample too short")
	}
	piece := m.Tok.Decode(sq.Tokens[2:3])
	if piece == "" || strings.Contains(m.Tok.Decode(sq.Tokens[:2]), piece) {
		t.Skip("token text empty or seen earlier")
	}
	stops := []string{piece}
	for i := 0; i < 5000; i++ {
		stops = append(stops, fmt.Sprintf("decoy-%d-never", i))
	}
	req.Params.StopStrings = stops
	got, err := m.Sample(context.Background(), nil, req)
	if err != nil {
		t.Fatal(err)
	}
	g := got.Sequences[0]
	if len(g.Tokens) != 3 || g.StopReason != StopReasonStop {
		t.Fatalf("stopped after %d tokens (%s), want 3 (stop)", len(g.Tokens), g.StopReason)
	}
	for i := range g.Tokens {
		if g.Tokens[i] != sq.Tokens[i] {
			t.Fatal("stop strings changed the sampled tokens")
		}
	}
}
