package api_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
)

// Sampling behaviour the SDK releases after 0.25 rely on (up to 0.38).

// The /asample reply names each sequence (SDK >= 0.26 asserts it): one id per sample,
// unique, and the same ids for a deduplicated replay.
func TestSampleSequenceIDs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	sm := h.sampler(h.a, h.session(h.a), 0)
	body := func(seq, n int) []byte {
		b, _ := json.Marshal(map[string]any{"sampling_session_id": sm, "seq_id": seq, "num_samples": n, "prompt": prompt(1, 2, 3),
			"sampling_params": map[string]any{"max_tokens": 3, "seed": 1}, "type": "sample"})
		return b
	}
	var f1, again, f2 sampleFuture
	h.a.Post("/api/v1/asample", body(1, 3), &f1)
	h.a.Post("/api/v1/asample", body(1, 3), &again)
	h.a.Post("/api/v1/asample", body(2, 1), &f2)
	if len(f1.SampleSequenceIDs) != 3 || len(f2.SampleSequenceIDs) != 1 {
		t.Fatalf("ids: %v, %v", f1.SampleSequenceIDs, f2.SampleSequenceIDs)
	}
	seen := map[string]bool{}
	for _, id := range append(append([]string{}, f1.SampleSequenceIDs...), f2.SampleSequenceIDs...) {
		if id == "" || seen[id] {
			t.Fatalf("empty or repeated id %q in %v %v", id, f1.SampleSequenceIDs, f2.SampleSequenceIDs)
		}
		seen[id] = true
	}
	if again.RequestID != f1.RequestID || strings.Join(again.SampleSequenceIDs, ",") != strings.Join(f1.SampleSequenceIDs, ",") {
		t.Fatalf("replay: %+v, first %+v", again, f1)
	}
	var res sampleJSON
	h.a.Result(f1.RequestID, &res)
	if len(res.Sequences) != len(f1.SampleSequenceIDs) {
		t.Fatalf("%d sequences for %d ids", len(res.Sequences), len(f1.SampleSequenceIDs))
	}
}

// stop=[] disables every stop token, EOS included; null keeps the stop at EOS.
func TestEmptyStopListRunsToMaxTokens(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	sm := h.sampler(h.a, h.session(h.a), 0)
	sample := func(seq int, seed int, stop any) sampleJSON {
		var f sampleFuture
		h.a.Post("/api/v1/asample", map[string]any{"sampling_session_id": sm, "seq_id": seq, "num_samples": 32, "prompt": prompt(5, 6, 7),
			"sampling_params": map[string]any{"max_tokens": 24, "seed": seed, "temperature": 4.0, "stop": stop}}, &f)
		var res sampleJSON
		h.a.Result(f.RequestID, &res)
		return res
	}
	seq := 0
	for seed := 0; seed < 20; seed++ {
		withEOS := sample(seq, seed, nil)
		early := -1
		for i, s := range withEOS.Sequences {
			if s.StopReason == "stop" && len(s.Tokens) < 24 {
				early = i
				break
			}
		}
		seq++
		if early < 0 {
			continue
		}
		none := sample(seq, seed, []any{})
		for i, s := range none.Sequences {
			if s.StopReason != "length" || len(s.Tokens) != 24 {
				t.Fatalf("stop=[]: sequence %d ended (%s) after %d tokens", i, s.StopReason, len(s.Tokens))
			}
		}
		if got, want := none.Sequences[early].Tokens[:len(withEOS.Sequences[early].Tokens)], withEOS.Sequences[early].Tokens; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("same seed, different draws: %v vs %v", got, want)
		}
		return
	}
	t.Fatal("no sequence stopped at EOS in 20 seeds: the test cannot show stop=[]")
}

// prompt_logprobs_last_n scores only the last N prompt tokens.
func TestPromptLogprobsLastN(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	sm := h.sampler(h.a, h.session(h.a), 0)
	req := func(seq int, extra map[string]any) *testenv.Response {
		body := map[string]any{"sampling_session_id": sm, "seq_id": seq, "num_samples": 1, "prompt": prompt(11, 12, 13, 14, 15, 16),
			"sampling_params": map[string]any{"max_tokens": 1}, "prompt_logprobs": true, "topk_prompt_logprobs": 3}
		for k, v := range extra {
			body[k] = v
		}
		return h.a.Do("POST", "/api/v1/asample", body, nil)
	}
	var f sampleFuture
	req(1, map[string]any{"prompt_logprobs_last_n": 2}).JSON(t, &f)
	var res sampleJSON
	h.a.Result(f.RequestID, &res)
	if len(res.PromptLogprobs) != 6 || len(res.TopkPromptLogprobs) != 6 {
		t.Fatalf("prompt logprobs: %+v", res)
	}
	for i, lp := range res.PromptLogprobs {
		if (i < 4) != (lp == nil) || (lp != nil && (*lp > 0 || math.IsNaN(*lp))) {
			t.Fatalf("prompt logprob %d: %v (want null before the last 2)", i, lp)
		}
		if row := res.TopkPromptLogprobs[i]; (i < 4) != (row == nil) || (row != nil && len(*row) != 3) {
			t.Fatalf("top-k row %d: %v", i, row)
		}
	}
	for _, tc := range []struct {
		extra map[string]any
		want  string
	}{
		{map[string]any{"prompt_logprobs_last_n": 0}, "prompt_logprobs_last_n"},
		{map[string]any{"prompt_logprobs_last_n": 6}, "len(prompt)-1 = 5"},
		{map[string]any{"prompt_logprobs_last_n": 2, "prompt_logprobs": false}, "prompt_logprobs"},
	} {
		if r := req(2, tc.extra); r.Status != 400 || !strings.Contains(string(r.Body), tc.want) {
			t.Errorf("%v: %d %s, want 400 naming %q", tc.extra, r.Status, r.Body, tc.want)
		}
	}
}
