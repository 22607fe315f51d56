package wire

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func sampleBody(extra string) []byte {
	return []byte(`{"prompt":{"chunks":[{"type":"encoded_text","tokens":[1,2,3]}]},"sampling_params":{"max_tokens":1}` + extra + `}`)
}

// The sampling outputs' request fields decode into the engine request: counts as they
// are, target_prompt_logprobs dense or CSR; null or absent targets ask nothing.
func TestDecodeSampleOutputsRequest(t *testing.T) {
	t.Parallel()
	c, err := DecodeSampleRequest(sampleBody(`,"topk_sample_logprobs":4,"prompt_alt_tokens_k":2,` +
		`"target_prompt_logprobs":{"data":[5,-1,7,8],"dtype":"int64","shape":[2,2]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Req
	if r.TopKSampleLogprobs != 4 || r.PromptAltTokensK != 2 || r.PromptTargets == nil ||
		r.PromptTargets.Rows != 2 || r.PromptTargets.Cols != 2 || r.PromptTargets.Sparse() || len(r.PromptTargets.IDs) != 4 || r.PromptTargets.IDs[1] != -1 {
		t.Fatalf("decoded %+v / %+v", r, r.PromptTargets)
	}
	c, err = DecodeSampleRequest(sampleBody(`,"target_prompt_logprobs":{"data":[5,7],"dtype":"int64","shape":[2,3],` +
		`"sparse_crow_indices":[0,1,2],"sparse_col_indices":[2,0]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Req.PromptTargets; !p.Sparse() || p.Rows != 2 || p.Cols != 3 || len(p.IDs) != 2 || p.ColIdx[0] != 2 || p.RowStarts[2] != 2 {
		t.Fatalf("decoded CSR %+v", p)
	}
	for _, body := range []string{`,"target_prompt_logprobs":null`, ``} {
		c, err = DecodeSampleRequest(sampleBody(body))
		if err != nil || c.Req.PromptTargets != nil {
			t.Fatalf("%q: %v, %+v", body, err, c.Req.PromptTargets)
		}
	}
}

// Malformed requests for the outputs are refused naming the field (the rest of the
// checks, against the prompt and the vocabulary, are engine.ValidateSample's, after
// api's conversion: api.TestSampleOutputsRefusedByTheEngine).
func TestDecodeSampleOutputsRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ body, want string }{
		{`,"topk_sample_logprobs":-1`, "topk_sample_logprobs"},
		{`,"prompt_alt_tokens_k":-3`, "prompt_alt_tokens_k"},
		{`,"target_prompt_logprobs":{"data":[0.5,1],"dtype":"float32","shape":[2,1]}`, "target_prompt_logprobs.dtype"},
		{`,"target_prompt_logprobs":{"data":[1,2],"dtype":"int64","shape":[2]}`, "target_prompt_logprobs.shape"},
		{`,"target_prompt_logprobs":{"data":[1,2,3],"dtype":"int64","shape":[2,1]}`, "target_prompt_logprobs.data"},
		{`,"target_prompt_logprobs":{"data":[1,-2],"dtype":"int64","shape":[2,1]}`, "target_prompt_logprobs.data[1]"},
		{`,"target_prompt_logprobs":{"data":[1,2.5],"dtype":"int64","shape":[2,1]}`, "target_prompt_logprobs.data[1]"},
		{`,"target_prompt_logprobs":{"data":[1],"dtype":"int64","shape":[2,1],"sparse_crow_indices":[0,1,1]}`, "sparse_col_indices"},
		{`,"target_prompt_logprobs":{"data":[1],"dtype":"int64","shape":[2,1],"sparse_crow_indices":[0,-1,1],"sparse_col_indices":[0]}`, "sparse_crow_indices[1]"},
		{`,"target_prompt_logprobs":{"data":[1],"dtype":"int64","shape":[2,1],"sparse_crow_indices":[],"sparse_col_indices":[0]}`, "sparse_crow_indices"},
		{`,"target_prompt_logprobs":{"data":[1,2],"dtype":"int64","shape":[2,1],"layout":"coo"}`, "target_prompt_logprobs.layout"},
		{`,"target_prompt_logprobs":[1,2]`, "target_prompt_logprobs"},
	} {
		_, err := DecodeSampleRequest(sampleBody(tc.body))
		var we *Error
		if !errors.As(err, &we) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %q", tc.body, err, tc.want)
		}
	}
}

// A result with the outputs survives the protobuf round trip (the JSON conversion and
// the Go client read it back that way).
func TestSampleOutputsProtoRoundTrip(t *testing.T) {
	t.Parallel()
	res := SampleResponse{
		Sequences: []Sequence{{Tokens: []int32{3}, Logprobs: []float32{-1}, StopReason: StopReasonStop,
			TopK: [][]TokenLogprob{{{Token: 3, Logprob: -1}, {Token: 4, Logprob: -2}}}}},
		PromptTargetLogprobs: &PromptTargetLogprobs{Rows: 2, Cols: 2, Logprobs: []float32{-1, -2}, RowStarts: []int{0, 0, 2}, ColIdx: []int{0, 1}},
		PromptAltTokens:      &PromptAltTokens{K: 1, Tokens: []int32{7, 8}, Logprobs: []float32{-0.5, -0.25}},
	}
	pb, err := EncodeSampleResponseProto(res)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeSampleResponseProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmtResult(back), fmtResult(res); got != want {
		t.Fatalf("round trip:\n got %s\nwant %s", got, want)
	}
}

func fmtResult(r SampleResponse) string {
	var b strings.Builder
	for _, s := range r.Sequences {
		b.WriteString(strings.TrimSpace(strings.ReplaceAll(fmtAny(s.TopK), "\n", " ")))
	}
	b.WriteString(fmtAny(*r.PromptTargetLogprobs))
	b.WriteString(fmtAny(*r.PromptAltTokens))
	return b.String()
}

func fmtAny(v any) string { return fmt.Sprintf("%+v", v) }
