package wire

import (
	"math"
	"strings"
	"testing"
)

func sampleCall() ForwardBackwardCall {
	return ForwardBackwardCall{ModelID: "s:train:0", SeqID: 7, Req: ForwardBackwardInput{LossFn: "ppo", LossFnConfig: map[string]float64{"clip_low_threshold": 0.7},
		Data: []Datum{{Tokens: []int32{1, 2, 3}, LossInputs: map[string]Tensor{
			"target_tokens": {DType: Int64, Shape: []int{3}, I64: []int64{2, 3, 4}},
			"advantages":    {DType: Float32, Shape: []int{3}, F32: []float32{0.5, -1, 2}}}}}}}
}

func TestForwardBackwardProtoRoundTrip(t *testing.T) {
	t.Parallel()
	b, err := EncodeForwardBackwardProto(sampleCall())
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeForwardBackwardProto(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.ModelID != "s:train:0" || got.SeqID != 7 || got.Req.LossFn != "ppo" || got.Req.LossFnConfig["clip_low_threshold"] != 0.7 {
		t.Fatalf("%+v", got)
	}
	d := got.Req.Data[0]
	if len(d.Tokens) != 3 || d.LossInputs["advantages"].F32[2] != 2 || d.LossInputs["target_tokens"].I64[0] != 2 {
		t.Fatalf("datum %+v", d)
	}
}

func TestForwardBackwardOutputRoundTripAndRecords(t *testing.T) {
	t.Parallel()
	res := ForwardBackwardOutput{Metrics: map[string]float64{"loss:sum": 3.5}, LossFnOutputs: []map[string]Tensor{
		{"logprobs": {DType: Float32, Shape: []int{2}, F32: []float32{-1, -2}}},
		{"logprobs": {DType: Float32, Shape: []int{3}, F32: []float32{-3, -4, -5}}},
		{"logprobs": {DType: Float32, Shape: []int{1, 2}, F32: []float32{-6, -7}}}, // new trailing shape: new record
	}}
	pb, err := EncodeForwardBackwardOutputProto(res, "cross_entropy")
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeForwardBackwardOutputProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.LossFnOutputs) != 3 || back.Metrics["loss:sum"] != 3.5 || back.LossFnOutputs[1]["logprobs"].F32[2] != -5 {
		t.Fatalf("%+v", back)
	}
	if s := back.LossFnOutputs[2]["logprobs"].Shape; len(s) != 2 || s[1] != 2 {
		t.Fatalf("trailing shape lost: %v", s)
	}
	js, err := ForwardBackwardOutputProtoToJSON(pb)
	if err != nil || !strings.Contains(string(js), `"loss:sum":3.5`) {
		t.Fatalf("json %s %v", js, err)
	}
}

func TestSampleResponseRoundTrip(t *testing.T) {
	t.Parallel()
	res := SampleResponse{Sequences: []Sequence{{Tokens: []int32{5, 6}, Logprobs: []float32{-0.1, -0.2}, StopReason: StopReasonLength}},
		PromptLogprobs:       []float32{float32(math.NaN()), -1.5},
		TopKPrompt:           [][]TokenLogprob{nil, {{Token: 3, Logprob: -0.5}, {Token: 4, Logprob: -1}}},
		PromptCacheHitTokens: 32}
	pb, err := EncodeSampleResponseProto(res)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeSampleResponseProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	if back.Sequences[0].StopReason != StopReasonLength || back.Sequences[0].Tokens[1] != 6 || !math.IsNaN(float64(back.PromptLogprobs[0])) {
		t.Fatalf("%+v", back)
	}
	if len(back.TopKPrompt[0]) != 0 || back.TopKPrompt[1][1].Token != 4 {
		t.Fatalf("topk %+v", back.TopKPrompt)
	}
	if back.PromptCacheHitTokens != 32 {
		t.Fatalf("prompt_cache_hit_tokens (protobuf field 4) %d, want 32", back.PromptCacheHitTokens)
	}
	js, _ := SampleResponseProtoToJSON(pb)
	if !strings.Contains(string(js), `"prompt_logprobs":[null,-1.5]`) || !strings.Contains(string(js), `"stop_reason":"length"`) ||
		!strings.Contains(string(js), `"prompt_cache_hit_tokens":32`) {
		t.Fatalf("json %s", js)
	}
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	t.Parallel()
	cases := []struct{ body, want string }{
		{`{"forward_backward_input":{"data":[],"loss_fn":"cross_entropy"},"model_id":"m","seq_id":1}`, "data"},
		{`{"forward_backward_input":{"data":[{"model_input":{"chunks":[{"type":"image","data":"x"}]},"loss_fn_inputs":{}}],"loss_fn":"x"},"model_id":"m"}`, "only encoded_text"},
		{`{"forward_backward_input":{"data":[{"model_input":{"chunks":[]},"loss_fn_inputs":{"weights":{"data":[1,2],"dtype":"float32","shape":[3]}}}],"loss_fn":"x"},"model_id":"m"}`, `loss_fn_inputs["weights"].shape`},
		{`{"forward_backward_input":{"data":[{"model_input":{"chunks":[]},"loss_fn_inputs":{"w":{"data":[1],"dtype":"complex64"}}}],"loss_fn":"x"},"model_id":"m"}`, "dtype"},
		{`{"forward_backward_input":{"data":[{"model_input":{"chunks":[]},"loss_fn_inputs":{"t":{"data":[1.5],"dtype":"int64"}}}],"loss_fn":"x"},"model_id":"m"}`, "not an integer"},
		{`{"forward_backward_input": 5}`, "forward_backward_input"},
		{`{"model_id": "m"} trailing`, "trailing"},
		{`{"model_id": `, "unexpected end"},
	}
	for _, c := range cases {
		_, err := DecodeForwardBackwardJSON([]byte(c.body), false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v does not mention %q", c.body, err, c.want)
		}
	}
	if _, err := DecodeForwardBackwardProto([]byte{0xff, 0x01}); err == nil || !strings.Contains(err.Error(), "protobuf") {
		t.Errorf("bad proto: %v", err)
	}
}

func TestSparseCSRBecomesDense(t *testing.T) {
	t.Parallel()
	td := tensorJSON{Data: numbers{1, 2}, DType: "float32", Shape: []int64{2, 3}, SparseCrowIndices: []int64{0, 1, 2}, SparseColIndices: []int64{2, 0}}
	et, err := td.tensor("weights")
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{0, 0, 1, 2, 0, 0}
	for i, v := range want {
		if et.F32[i] != v {
			t.Fatalf("dense %v", et.F32)
		}
	}
	td.SparseColIndices = []int64{5, 0}
	if _, err := td.tensor("weights"); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("bad column: %v", err)
	}
}

func TestSampleRequestStopForms(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"prompt":{"chunks":[{"type":"encoded_text","tokens":[1]}]},"sampling_params":{"stop":"\n"}}`:            "s:\n",
		`{"prompt":{"chunks":[{"type":"encoded_text","tokens":[1]}]},"sampling_params":{"stop":["a","b"]}}`:       "s:a,b",
		`{"prompt":{"chunks":[{"type":"encoded_text","tokens":[1]}]},"sampling_params":{"stop":[7, 8]}}`:          "t:7,8",
		`{"prompt":{"chunks":[{"type":"encoded_text","tokens":[1]}]},"sampling_params":{"stop":null},"seq_id":3}`: "",
	} {
		c, err := DecodeSampleRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if len(c.Req.Params.StopStrings) > 0 {
			got = "s:" + strings.Join(c.Req.Params.StopStrings, ",")
		}
		if len(c.Req.Params.StopTokens) > 0 {
			got = "t:"
			for i, x := range c.Req.Params.StopTokens {
				if i > 0 {
					got += ","
				}
				got += string(rune('0' + x))
			}
		}
		if got != want || c.Req.Params.Temperature != 1 || c.Req.Params.TopK != -1 || c.Req.NumSamples != 1 {
			t.Fatalf("%s: %q %+v", body, got, c.Req.Params)
		}
	}
}

func TestDecompressRefusesBombs(t *testing.T) {
	t.Parallel()
	if _, err := Decompress("gzip", []byte("x"), 10); err == nil {
		t.Fatal("unknown encoding accepted")
	}
	if _, err := Decompress("zstd", []byte("not zstd"), 10); err == nil {
		t.Fatal("corrupt zstd accepted")
	}
	big := zstdCompress(t, make([]byte, 1<<20))
	if _, err := Decompress("zstd", big, 1000); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("bomb: %v", err)
	}
	out, err := Decompress("zstd", big, 2<<20)
	if err != nil || len(out) != 1<<20 {
		t.Fatalf("legit zstd: %d %v", len(out), err)
	}
}

func FuzzDecodeForwardBackwardProto(f *testing.F) {
	b, _ := EncodeForwardBackwardProto(sampleCall())
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		call, err := DecodeForwardBackwardProto(data)
		if err == nil && call.ModelID == "" {
			t.Fatal("accepted a request without model_id")
		}
	})
}

func FuzzDecodeForwardBackwardJSON(f *testing.F) {
	f.Add([]byte(`{"forward_backward_input":{"data":[{"model_input":{"chunks":[{"type":"encoded_text","tokens":[1,2]}]},"loss_fn_inputs":{"target_tokens":{"data":[2,3],"dtype":"int64","shape":[2]}}}],"loss_fn":"cross_entropy"},"model_id":"m","seq_id":1}`))
	f.Add([]byte(`{"forward_input":{"data":[{"model_input":{"chunks":[]},"loss_fn_inputs":{"w":{"data":[1],"dtype":"float32","shape":[1,1],"sparse_crow_indices":[0,1],"sparse_col_indices":[0]}}}]},"model_id":"m"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = DecodeForwardBackwardJSON(data, false)
	})
}

func FuzzDecodeSampleRequest(f *testing.F) {
	f.Add([]byte(`{"num_samples":2,"prompt":{"chunks":[{"type":"encoded_text","tokens":[1]}]},"sampling_params":{"max_tokens":3,"stop":["x"]}}`))
	f.Add([]byte(`{"prompt":{"chunks":[{"type":"encoded_text","tokens":[1,2,3]}]},"sampling_params":{"max_tokens":1},"topk_sample_logprobs":2,"prompt_alt_tokens_k":3,` +
		`"target_prompt_logprobs":{"data":[5,-1,7],"dtype":"int64","shape":[2,2],"sparse_crow_indices":[0,2,3],"sparse_col_indices":[0,1,1]}}`))
	f.Add([]byte(`{"prompt":{"chunks":[{"type":"encoded_text","tokens":[1,2,3]}]},"sampling_params":{"max_tokens":1},"target_prompt_logprobs":{"data":[5,-1],"dtype":"int64","shape":[2,1]}}`))
	// api.FuzzSampleRequestAtTheEdge runs the engine's checks on what this lets through.
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = DecodeSampleRequest(data)
	})
}

func FuzzDecompress(f *testing.F) {
	f.Add([]byte("hello"))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Decompress("zstd", data, 1<<16)
		if err == nil && len(out) > 1<<16 {
			t.Fatal("cap exceeded")
		}
	})
}
