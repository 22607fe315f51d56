package api_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/internal/testenv"
)

// The sampling outputs of SDK 0.29-0.31 over the API: topk_sample_logprobs,
// target_prompt_logprobs (dense and CSR) and prompt_alt_tokens_k come back in the
// protobuf result the SDK reads (and in the JSON form), with values consistent with the
// prompt logprobs computed beside them; bad values are refused with a 400 naming the
// field or the limit. (engine.TestSampleOutputsMatchFullSoftmax checks the numbers
// against the full softmax; backend.TestPromptOutputsInTheScheduler the batching.)
func TestSampleOutputsOverTheAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	sm := h.sampler(h.a, h.session(h.a), 0)
	toks := []int{11, 12, 13, 14, 15, 16}
	seq := 0
	sample := func(extra map[string]any) *testenv.Response {
		seq++
		body := map[string]any{"sampling_session_id": sm, "seq_id": seq, "num_samples": 2, "prompt": prompt(toks...),
			"sampling_params": map[string]any{"max_tokens": 3, "temperature": 0}, "prompt_logprobs": true, "topk_prompt_logprobs": 1}
		for k, v := range extra {
			body[k] = v
		}
		return h.a.Do("POST", "/api/v1/asample", body, nil)
	}
	result := func(r *testenv.Response) wire.SampleResponse {
		t.Helper()
		var f sampleFuture
		r.JSON(t, &f)
		pr := h.a.Wait(f.RequestID, "application/x-protobuf")
		if pr.Status != 200 || pr.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Fatalf("result: %d %s", pr.Status, pr.Body)
		}
		res, err := wire.DecodeSampleResponseProto(pr.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Dense targets: column 0 the next prompt token, column 1 token 7 from row 2 on (-1
	// before).
	ids := []int{}
	for r := 0; r < len(toks)-1; r++ {
		other := 7
		if r < 2 {
			other = -1
		}
		ids = append(ids, toks[r+1], other)
	}
	dense := map[string]any{"data": ids, "dtype": "int64", "shape": []int{len(toks) - 1, 2}}
	r := sample(map[string]any{"topk_sample_logprobs": 3, "prompt_alt_tokens_k": 2, "target_prompt_logprobs": dense})
	res := result(r)
	near := func(what string, a, b float32) {
		t.Helper()
		if math.Abs(float64(a-b)) > 1e-5 {
			t.Fatalf("%s: %v vs %v", what, a, b)
		}
	}
	for i, sq := range res.Sequences {
		if len(sq.TopK) != len(sq.Tokens) {
			t.Fatalf("sequence %d: %d top-k rows for %d tokens", i, len(sq.TopK), len(sq.Tokens))
		}
		for j, top := range sq.TopK {
			if len(top) != 3 || top[0].Token != sq.Tokens[j] {
				t.Fatalf("sequence %d token %d: greedy token %d, top-k %v", i, j, sq.Tokens[j], top)
			}
			near("top-1 logprob vs the sampled token's", top[0].Logprob, sq.Logprobs[j])
			if top[1].Logprob > top[0].Logprob || top[2].Logprob > top[1].Logprob {
				t.Fatalf("top-k not best first: %v", top)
			}
		}
	}
	tl := res.PromptTargetLogprobs
	if tl == nil || tl.Rows != len(toks)-1 || tl.Cols != 2 || tl.RowStarts != nil || len(tl.Logprobs) != 2*(len(toks)-1) {
		t.Fatalf("target logprobs %+v", tl)
	}
	for r := 0; r < tl.Rows; r++ {
		near(fmt.Sprint("target of the next token at row ", r), tl.Logprobs[2*r], res.PromptLogprobs[r+1])
		if r < 2 && tl.Logprobs[2*r+1] != 0 {
			t.Fatalf("a -1 cell holds %v", tl.Logprobs[2*r+1])
		}
		if r >= 2 && !(tl.Logprobs[2*r+1] < 0) {
			t.Fatalf("target logprob of token 7 at row %d: %v", r, tl.Logprobs[2*r+1])
		}
	}
	alt := res.PromptAltTokens
	if alt == nil || alt.K != 2 || len(alt.Tokens) != 2*(len(toks)-1) {
		t.Fatalf("alternative tokens %+v", alt)
	}
	for r := 0; r < len(toks)-1; r++ {
		best := res.TopKPrompt[r+1][0] // at temperature 0 every draw is the argmax
		for j := 0; j < 2; j++ {
			if alt.Tokens[2*r+j] != best.Token {
				t.Fatalf("greedy alternative at row %d: %d, the most likely token %d", r, alt.Tokens[2*r+j], best.Token)
			}
			near("alternative's logprob", alt.Logprobs[2*r+j], best.Logprob)
		}
	}
	// The same cells in CSR form: the layout comes back, the values are the same.
	crow, col, vals := []int{0}, []int{}, []int{}
	for r := 0; r < len(toks)-1; r++ {
		for c := 0; c < 2; c++ {
			if id := ids[2*r+c]; id >= 0 {
				col, vals = append(col, c), append(vals, id)
			}
		}
		crow = append(crow, len(vals))
	}
	sparse := map[string]any{"data": vals, "dtype": "int64", "shape": []int{len(toks) - 1, 2}, "sparse_crow_indices": crow, "sparse_col_indices": col}
	r = sample(map[string]any{"target_prompt_logprobs": sparse})
	sres := result(r)
	st := sres.PromptTargetLogprobs
	if st == nil || fmt.Sprint(st.RowStarts) != fmt.Sprint(crow) || fmt.Sprint(st.ColIdx) != fmt.Sprint(col) || len(st.Logprobs) != len(vals) {
		t.Fatalf("sparse target logprobs %+v", st)
	}
	for rr := 0; rr < len(toks)-1; rr++ {
		for x := crow[rr]; x < crow[rr+1]; x++ {
			near("sparse target logprob", st.Logprobs[x], tl.Logprobs[2*rr+col[x]])
		}
	}
	if sres.PromptAltTokens != nil || sres.Sequences[0].TopK != nil {
		t.Fatal("outputs nobody asked for")
	}
	// The JSON form of the same result names the SDK's fields.
	var f sampleFuture
	sample(map[string]any{"topk_sample_logprobs": 2, "prompt_alt_tokens_k": 1, "target_prompt_logprobs": sparse}).JSON(t, &f)
	var js struct {
		Sequences []struct {
			TopkLogprobs [][][2]float64 `json:"topk_logprobs"`
		} `json:"sequences"`
		TargetPromptLogprobs struct {
			Data  []float64 `json:"data"`
			DType string    `json:"dtype"`
			Shape []int     `json:"shape"`
			Crow  []int     `json:"sparse_crow_indices"`
		} `json:"target_prompt_logprobs"`
		PromptAltTokens struct {
			Tokens struct {
				Data  []int `json:"data"`
				Shape []int `json:"shape"`
			} `json:"tokens"`
		} `json:"prompt_alt_tokens"`
	}
	raw := h.a.Result(f.RequestID, nil)
	if err := json.Unmarshal(raw.Body, &js); err != nil {
		t.Fatal(err)
	}
	if len(js.Sequences) != 2 || len(js.Sequences[0].TopkLogprobs) != 3 || len(js.Sequences[0].TopkLogprobs[0]) != 2 ||
		js.TargetPromptLogprobs.DType != "float32" || fmt.Sprint(js.TargetPromptLogprobs.Crow) != fmt.Sprint(crow) ||
		len(js.TargetPromptLogprobs.Data) != len(vals) || fmt.Sprint(js.PromptAltTokens.Tokens.Shape) != fmt.Sprint([]int{len(toks) - 1, 1}) {
		t.Fatalf("JSON result %s", raw.Body)
	}

	// Refusals, before anything is queued.
	bad := func(data []int, shape []int, extra map[string]any) map[string]any {
		m := map[string]any{"data": data, "dtype": "int64", "shape": shape}
		for k, v := range extra {
			m[k] = v
		}
		return map[string]any{"target_prompt_logprobs": m}
	}
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  string
	}{
		{"negative top-k", map[string]any{"topk_sample_logprobs": -1}, "topk_sample_logprobs"},
		{"top-k over the limit", map[string]any{"topk_sample_logprobs": 21}, "limits.max_topk_sample_logprobs 20"},
		{"negative alternatives", map[string]any{"prompt_alt_tokens_k": -1}, "prompt_alt_tokens_k"},
		{"alternatives over the limit", map[string]any{"prompt_alt_tokens_k": 33}, "limits.max_prompt_alt_tokens_k 32"},
		{"rows", bad([]int{1, 2, 3}, []int{3, 1}, nil), "len(prompt)-1 = 5"},
		{"outside the vocabulary", bad([]int{1, 2, 3, 4, 99999}, []int{5, 1}, nil), "vocabulary"},
		{"below -1", bad([]int{1, 2, 3, 4, -5}, []int{5, 1}, nil), "target_prompt_logprobs.data[4]"},
		{"all -1", bad([]int{-1, -1, -1, -1, -1}, []int{5, 1}, nil), "names no token id"},
		{"1-D", bad([]int{1, 2, 3, 4, 5}, []int{5}, nil), "target_prompt_logprobs.shape"},
		{"float", map[string]any{"target_prompt_logprobs": map[string]any{"data": []float64{0.5}, "dtype": "float32", "shape": []int{5, 1}}}, "target_prompt_logprobs.dtype"},
		{"CSR without columns", bad([]int{3}, []int{5, 1}, map[string]any{"sparse_crow_indices": []int{0, 1, 1, 1, 1, 1}}), "sparse_col_indices"},
		{"CSR rows", bad([]int{3}, []int{5, 1}, map[string]any{"sparse_crow_indices": []int{0, 1}, "sparse_col_indices": []int{0}}), "sparse_crow_indices"},
		{"CSR column", bad([]int{3}, []int{5, 1}, map[string]any{"sparse_crow_indices": []int{0, 1, 1, 1, 1, 1}, "sparse_col_indices": []int{4}}), "sparse_col_indices"},
		{"CSR past the values", bad([]int{3}, []int{5, 1}, map[string]any{"sparse_crow_indices": []int{0, 7, 1, 1, 1, 1}, "sparse_col_indices": []int{0}}), "sparse_crow_indices"},
	} {
		if r := sample(tc.extra); r.Status != 400 || !strings.Contains(string(r.Body), tc.want) {
			t.Errorf("%s: %d %s, want 400 naming %q", tc.name, r.Status, r.Body, tc.want)
		}
	}
	// After the refusals the sampler still samples.
	if res := result(sample(nil)); len(res.Sequences) != 2 {
		t.Fatalf("after the refusals: %+v", res)
	}
}

// limits.max_prompt_output_cells bounds target_prompt_logprobs' cells and the
// alternative draws over the prompt, with a 400 naming it.
func TestPromptOutputCellsLimit(t *testing.T) {
	t.Parallel()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Limits.MaxPromptOutputCells = 8
	a := testenv.NewClient(t, testenv.Start(t, cfg).URL(), testenv.KeyA)
	h := &harness{t: t, a: a}
	sm := h.sampler(a, h.session(a), 0)
	sample := func(seq int, extra map[string]any) *testenv.Response {
		body := map[string]any{"sampling_session_id": sm, "seq_id": seq, "num_samples": 1, "prompt": prompt(1, 2, 3, 4, 5),
			"sampling_params": map[string]any{"max_tokens": 1}}
		for k, v := range extra {
			body[k] = v
		}
		return a.Do("POST", "/api/v1/asample", body, nil)
	}
	targets := func(cols int) map[string]any {
		ids := make([]int, 4*cols)
		return map[string]any{"target_prompt_logprobs": map[string]any{"data": ids, "dtype": "int64", "shape": []int{4, cols}}}
	}
	for i, tc := range []struct {
		extra map[string]any
		ok    bool
	}{
		{map[string]any{"prompt_alt_tokens_k": 2}, true},
		{map[string]any{"prompt_alt_tokens_k": 3}, false},
		{targets(2), true},
		{targets(3), false},
	} {
		r := sample(i+1, tc.extra)
		if tc.ok != (r.Status == 200) || (!tc.ok && !strings.Contains(string(r.Body), "limits.max_prompt_output_cells 8")) {
			t.Errorf("%v: %d %s", tc.extra, r.Status, r.Body)
		}
	}
}
