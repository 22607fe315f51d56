package engine

import (
	"testing"
)

// A Generation is a state machine without decode steps: its draws come from one stream
// per sample (the prompt's draw of sample i is the first of sample i's stream, whatever
// else is asked), and Accept decides the stop reason and assembles the result.
func TestGenerationDrawsAndStops(t *testing.T) {
	m := tinyModel(t)
	seed := int64(7)
	req := SampleRequest{Prompt: []int32{40, 41, 42}, NumSamples: 3, TopKSampleLogprobs: 2,
		Params: SampleParams{MaxTokens: 3, Temperature: 1, TopK: -1, TopP: 1, Seed: &seed, StopTokens: []int32{9}}}
	g, err := NewGeneration(m, req, 1)
	if err != nil {
		t.Fatal(err)
	}
	first := g.Draws(-1)
	if len(first) != 3 || first[0].U == first[1].U || first[0].Top != 2 {
		t.Fatalf("prompt draws %+v: want one per sample, from distinct streams, asking for top 2", first)
	}
	for i := range 3 {
		h, err := NewGeneration(m, req, 0)
		if err != nil {
			t.Fatal(err)
		}
		if d := h.Draws(i)[0]; d.U != first[i].U {
			t.Fatalf("sample %d: its own first draw U=%v, the prompt's %v: the streams depend on each other", i, d.U, first[i].U)
		}
	}
	top := []TokenLogprob{{Token: 9, Logprob: -0.1}, {Token: 5, Logprob: -2}, {Token: 6, Logprob: -3}}
	if ev := g.Accept(0, 9, -0.1, top); ev.Stop != StopReasonStop || len(ev.Top) != 1 || ev.Seq != 0 {
		t.Fatalf("a stop token: event %+v, want Stop %q and the stream's top 1", ev, StopReasonStop)
	}
	for range 2 {
		if ev := g.Accept(1, 5, -2, top); ev.Stop != "" {
			t.Fatalf("before max_tokens: stopped (%s)", ev.Stop)
		}
	}
	if ev := g.Accept(1, 5, -2, top); ev.Stop != StopReasonLength {
		t.Fatalf("at max_tokens: Stop %q, want %q", ev.Stop, StopReasonLength)
	}
	if got := g.Tokens(1); len(got) != 3 {
		t.Fatalf("sample 1 holds %v, want 3 tokens", got)
	}
	res := g.Result()
	if res.OutputTokens != 4 || res.PromptTokens != 3 || len(res.Sequences[0].TopK[0]) != 2 || res.Sequences[1].StopReason != StopReasonLength {
		t.Fatalf("result %+v", res)
	}

	// Temperature 0 is argmax: no variate is drawn.
	req.Params.Temperature = 0
	g, err = NewGeneration(m, req, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range g.Draws(-1) {
		if d.U != 0 {
			t.Fatalf("greedy draw %+v has a variate", d)
		}
	}
}
