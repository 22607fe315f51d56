package engine

import (
	"context"
	"math"
	"sort"
	"testing"
)

// OnToken reports every token of every sequence, in order, with the logprobs and stop
// reasons the result holds, and Top is the true top-k of the step.
func TestOnTokenReportsEveryTokenAsSampled(t *testing.T) {
	m := tinyModel(t)
	seed := int64(5)
	for _, temp := range []float64{0, 0.8} {
		req := SampleRequest{Prompt: []int32{40, 41, 42}, NumSamples: 3,
			Params: SampleParams{MaxTokens: 7, Temperature: temp, TopK: -1, TopP: 1, Seed: &seed}}
		got := make([][]TokenEvent, req.NumSamples)
		res, err := m.SampleWithHooks(context.Background(), nil, req, SampleHooks{TopLogprobs: 4,
			OnToken: func(ev TokenEvent) { got[ev.Seq] = append(got[ev.Seq], ev) }})
		if err != nil {
			t.Fatal(err)
		}
		plain, err := m.Sample(context.Background(), nil, req)
		if err != nil {
			t.Fatal(err)
		}
		for i, sq := range res.Sequences {
			if len(got[i]) != len(sq.Tokens) || len(sq.Tokens) != len(plain.Sequences[i].Tokens) {
				t.Fatalf("temperature %g, sequence %d: %d events, %d tokens (%d without hooks)", temp, i, len(got[i]), len(sq.Tokens), len(plain.Sequences[i].Tokens))
			}
			for j, ev := range got[i] {
				if ev.Token != sq.Tokens[j] || ev.Logprob != sq.Logprobs[j] || ev.Token != plain.Sequences[i].Tokens[j] {
					t.Fatalf("sequence %d token %d: event %+v, result %d/%v", i, j, ev, sq.Tokens[j], sq.Logprobs[j])
				}
				last := j == len(got[i])-1
				if (ev.Stop != "") != last || (last && ev.Stop != sq.StopReason) {
					t.Fatalf("sequence %d token %d: stop %q (last %v, result %q)", i, j, ev.Stop, last, sq.StopReason)
				}
				if len(ev.Top) != 4 || !sort.SliceIsSorted(ev.Top, func(a, b int) bool { return ev.Top[a].Logprob > ev.Top[b].Logprob }) {
					t.Fatalf("top logprobs %+v", ev.Top)
				}
				found := false
				for _, tl := range ev.Top {
					if tl.Token == ev.Token {
						found = true
						if math.Abs(float64(tl.Logprob-ev.Logprob)) > 1e-5 {
							t.Fatalf("top entry of the sampled token %v, its logprob %v", tl.Logprob, ev.Logprob)
						}
					}
				}
				if temp == 0 && (!found || ev.Top[0].Token != ev.Token) {
					t.Fatalf("greedy token %d is not the top entry %+v", ev.Token, ev.Top)
				}
			}
		}
	}
}

func TestTopLogprobsMatchesFullSort(t *testing.T) {
	logits := []float32{0.5, 3, -1, 3, 2, 0, 7, -4}
	got := topLogprobs(logits, 0.5, 3)
	want := sortedTop(logSoftmax(logits, 0.5), 3)
	if len(got) != len(want) {
		t.Fatalf("got %v want %v", got, want)
	}
	for i := range got {
		if got[i].Token != want[i].Token || math.Abs(float64(got[i].Logprob-want[i].Logprob)) > 1e-6 {
			t.Fatalf("entry %d: got %+v want %+v", i, got[i], want[i])
		}
	}
	if all := topLogprobs(logits, 1, 100); len(all) != len(logits) {
		t.Fatalf("k above the vocabulary: %d entries", len(all))
	}
}

func logSoftmax(logits []float32, temp float64) []float32 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v)/temp)
	}
	var s float64
	for _, v := range logits {
		s += math.Exp(float64(v)/temp - mx)
	}
	out := make([]float32, len(logits))
	for i, v := range logits {
		out[i] = float32(float64(v)/temp - mx - math.Log(s))
	}
	return out
}

// sortedTop is the k largest entries of logp by a full sort (ties: the lower token first).
func sortedTop(logp []float32, k int) []TokenLogprob {
	all := make([]TokenLogprob, len(logp))
	for i, v := range logp {
		all[i] = TokenLogprob{Token: int32(i), Logprob: v}
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].Logprob > all[b].Logprob })
	return all[:k]
}
