package workerpb

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tuft-go/tuft/engine"
)

func TestForwardRoundTrip(t *testing.T) {
	req := engine.ForwardRequest{LossFn: "ppo", LossFnConfig: map[string]float64{"clip_low_threshold": 0.8}, Backward: true,
		Data: []engine.Datum{{Tokens: []int32{1, 2, 3}, LossInputs: map[string]engine.Tensor{
			"target_tokens": {DType: engine.Int64, Shape: []int{3}, I64: []int64{2, 3, 4}},
			"advantages":    {DType: engine.Float32, Shape: []int{3}, F32: []float32{0.5, -1, 2}}}}}}
	b, err := proto.Marshal(FromForwardRequest(&AdapterRef{Model: "m", LoraId: "l"}, req))
	if err != nil {
		t.Fatal(err)
	}
	var msg ForwardBackwardRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		t.Fatal(err)
	}
	got, err := ToForwardRequest(&msg)
	if err != nil {
		t.Fatal(err)
	}
	if got.LossFn != "ppo" || !got.Backward || got.LossFnConfig["clip_low_threshold"] != 0.8 || len(got.Data) != 1 ||
		got.Data[0].LossInputs["advantages"].F32[1] != -1 || got.Data[0].LossInputs["target_tokens"].I64[2] != 4 ||
		got.Data[0].LossInputs["target_tokens"].Shape[0] != 3 {
		t.Fatalf("round trip: %+v", got)
	}
}

// FuzzDecode: whatever bytes arrive as a request, decoding and converting them fails
// cleanly or yields engine values, never a panic.
func FuzzDecode(f *testing.F) {
	b, _ := proto.Marshal(FromForwardRequest(&AdapterRef{Model: "m"}, engine.ForwardRequest{LossFn: "cross_entropy",
		Data: []engine.Datum{{Tokens: []int32{1}, LossInputs: map[string]engine.Tensor{"target_tokens": {DType: engine.Int64, Shape: []int{1}, I64: []int64{1}}}}}}))
	f.Add(b)
	seed := int64(3)
	s, _ := proto.Marshal(FromSampleRequest(&AdapterRef{Model: "m"}, engine.SampleRequest{Prompt: []int32{1}, NumSamples: 1, Params: engine.SampleParams{Seed: &seed}}))
	f.Add(s)
	f.Fuzz(func(t *testing.T, data []byte) {
		var fb ForwardBackwardRequest
		if proto.Unmarshal(data, &fb) == nil {
			_, _ = ToForwardRequest(&fb)
		}
		var sr SampleRequest
		if proto.Unmarshal(data, &sr) == nil {
			_ = ToSampleRequest(&sr)
		}
		var rep SampleReply
		if proto.Unmarshal(data, &rep) == nil {
			_ = ToSampleResult(&rep)
		}
		var fr ForwardBackwardReply
		if proto.Unmarshal(data, &fr) == nil {
			_, _ = ToForwardResult(&fr)
		}
		var mi ModelConfig
		if proto.Unmarshal(data, &mi) == nil {
			_ = ToConfig(&mi)
		}
	})
}

// Every sampling parameter crosses to the worker, stop=[] (IgnoreEOS) included.
func TestSampleParamsRoundTrip(t *testing.T) {
	seed := int64(9)
	in := engine.SampleRequest{Prompt: []int32{1, 2}, NumSamples: 2, PromptLogprobs: true, TopKPromptLogprobs: 3,
		Params: engine.SampleParams{MaxTokens: 7, Temperature: 0.5, TopK: 4, TopP: 0.9, Seed: &seed,
			StopStrings: []string{"x"}, StopTokens: []int32{5}, IgnoreEOS: true}}
	b, err := proto.Marshal(FromSampleRequest(&AdapterRef{Model: "m"}, in))
	if err != nil {
		t.Fatal(err)
	}
	var msg SampleRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		t.Fatal(err)
	}
	got := ToSampleRequest(&msg)
	p := got.Params
	if !p.IgnoreEOS || p.MaxTokens != 7 || p.Temperature != 0.5 || p.TopK != 4 || p.TopP != 0.9 || *p.Seed != 9 ||
		p.StopStrings[0] != "x" || p.StopTokens[0] != 5 || got.TopKPromptLogprobs != 3 || !got.PromptLogprobs || got.NumSamples != 2 {
		t.Fatalf("round trip: %+v", got)
	}
}
