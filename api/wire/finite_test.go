package wire

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// Non-finite numbers in results encode as null; finite ones exactly as encoding/json does.
func TestJSONResultsEncodeNonFiniteAsNull(t *testing.T) {
	t.Parallel()
	res := ForwardBackwardOutput{Metrics: map[string]float64{"loss:sum": math.NaN(), "x": math.Inf(1), "ok": 1.5},
		LossFnOutputs: []map[string]Tensor{{"logprobs": {DType: Float32, Shape: []int{2}, F32: []float32{float32(math.Inf(-1)), -1}}}}}
	pb, err := EncodeForwardBackwardOutputProto(res, "cross_entropy")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ForwardBackwardOutputProtoToJSON(pb)
	if err != nil {
		t.Fatalf("forward result with NaN: %v", err)
	}
	if !strings.Contains(string(b), `"loss:sum":null`) || !strings.Contains(string(b), `"ok":1.5`) || !strings.Contains(string(b), `[null,-1]`) {
		t.Fatalf("forward result: %s", b)
	}
	sr := SampleResponse{Sequences: []Sequence{{Tokens: []int32{1, 2}, Logprobs: []float32{float32(math.Inf(-1)), -0.5}}},
		PromptLogprobs: []float32{float32(math.NaN()), float32(math.Inf(-1))},
		TopKPrompt:     [][]TokenLogprob{nil, {{Token: 3, Logprob: float32(math.Inf(-1))}}}}
	pb, err = EncodeSampleResponseProto(sr)
	if err != nil {
		t.Fatal(err)
	}
	b, err = SampleResponseProtoToJSON(pb)
	if err != nil {
		t.Fatalf("sample result with -Inf: %v", err)
	}
	if !strings.Contains(string(b), `"logprobs":[null,-0.5]`) || !strings.Contains(string(b), `"prompt_logprobs":[null,null]`) || !strings.Contains(string(b), `[3,null]`) {
		t.Fatalf("sample result: %s", b)
	}
	b, err = json.Marshal(OptimStepResponse{Metrics: map[string]float64{"grad_norm:max": math.Inf(1)}})
	if err != nil || string(b) != `{"metrics":{"grad_norm:max":null}}` {
		t.Fatalf("optim_step result: %s %v", b, err)
	}
}

func TestFiniteEncodingMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 1e-7, 1e-6, 1e20, 1e21, 1e300, 5e-324, 123.456, 1.0 / 3}
	for i := 0; i < 2000; i++ {
		vals = append(vals, math.Float64frombits(rng.Uint64()))
	}
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		want, _ := json.Marshal(map[string]float64{"k": v})
		got, _ := json.Marshal(Metrics{"k": v})
		if string(got) != string(want) {
			t.Fatalf("float64 %v: %s, encoding/json %s", v, got, want)
		}
		f := float32(v)
		if math.IsInf(float64(f), 0) {
			continue
		}
		want, _ = json.Marshal([]float32{f})
		got, _ = json.Marshal(Floats{f})
		if string(got) != string(want) {
			t.Fatalf("float32 %v: %s, encoding/json %s", f, got, want)
		}
	}
}
