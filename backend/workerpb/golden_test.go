package workerpb

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/internal/testenv/check"
)

// Golden files of the worker protocol (testdata/golden/<message>.pb): every message the
// API server and a worker exchange, encoded from fixed values. An API server and a worker
// of different builds meet during a rolling upgrade, so a change that would make one
// misread the other (a renumbered field, a changed conversion) fails here.
//
// go test ./backend/workerpb -run Golden -update rewrites them; review the diff.

// goldenCase is one message: built from engine values by the conversion both ends use,
// and, where a conversion back exists, read back into those values.
type goldenCase struct {
	msg  proto.Message
	back func(m proto.Message) (any, error) // nil: the message has no engine form
	want any
}

func goldenCases() map[string]goldenCase {
	ref := &AdapterRef{Model: "tuft/tiny", LoraId: "run-1"}
	seed := int64(11)
	cfg := engine.Config{Arch: "llama", VocabSize: 512, Hidden: 64, Intermediate: 128, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
		RopeTheta: 10000, RopeScaling: &engine.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 512},
		RMSNormEps: 1e-5, TieEmbeddings: true, MaxPositions: 1024, BOSTokenID: 1, EOSTokenIDs: []int32{2, 3}}
	lora := engine.LoraConfig{Rank: 8, Alpha: 16, Seed: 3, TrainAttn: true, TrainMLP: true}
	fwd := engine.ForwardRequest{LossFn: "ppo", LossFnConfig: map[string]float64{"clip_low_threshold": 0.8}, Backward: true,
		Data: []engine.Datum{{Tokens: []int32{1, 2, 3}, LossInputs: map[string]engine.Tensor{
			"target_tokens": {DType: engine.Int64, Shape: []int{3}, I64: []int64{2, 3, 4}},
			"advantages":    {DType: engine.Float32, Shape: []int{3}, F32: []float32{0.5, -1, 2}}}}}}
	fres := engine.ForwardResult{Metrics: map[string]float64{"loss:sum": 1.5}, Tokens: 3,
		Outputs: []map[string]engine.Tensor{{"logprobs": {DType: engine.Float32, Shape: []int{3}, F32: []float32{-0.5, -1, -2}}}}}
	adam := engine.AdamParams{LearningRate: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-12, WeightDecay: 0.01, GradClipNorm: 1}
	dimuon := engine.StepParams{Dimuon: &engine.DimuonParams{LearningRate: 0.02, GradClipNorm: 1, Beta1: 0.9, Damping: 0.1, RankLRCorrectionExponent: 0.5}}
	dimuonLora := lora
	dimuonLora.Optimizer = engine.OptimizerConfig{Type: engine.OptimizerDimuon, Version: 1}
	textFwd := fwd
	textFwd.LossFnTextConfig = map[string]string{"mode": "sequence"}
	sreq := engine.SampleRequest{Prompt: []int32{1, 2, 3}, NumSamples: 2, PromptLogprobs: true, TopKPromptLogprobs: 2,
		Params: engine.SampleParams{MaxTokens: 8, Temperature: 0.7, TopK: 40, TopP: 0.9, Seed: &seed, StopStrings: []string{"\n\n"}, StopTokens: []int32{2}}}
	sres := engine.SampleResult{PromptTokens: 3, OutputTokens: 3, PromptCacheHitTokens: 16,
		Sequences:      []engine.Sequence{{Tokens: []int32{5, 6}, Logprobs: []float32{-0.5, -0.75}, StopReason: engine.StopReasonLength}, {Tokens: []int32{2}, Logprobs: []float32{-0.125}, StopReason: engine.StopReasonStop}},
		PromptLogprobs: []float32{0, -2.5, -3},
		TopKPrompt:     [][]engine.TokenLogprob{nil, {{Token: 2, Logprob: -2.5}, {Token: 9, Logprob: -3.5}}, {{Token: 3, Logprob: -3}}}}
	tok := engine.TokenEvent{Seq: 1, Token: 6, Logprob: -0.75, Top: []engine.TokenLogprob{{Token: 6, Logprob: -0.75}, {Token: 7, Logprob: -1.5}}, Stop: engine.StopReasonLength}

	return map[string]goldenCase{
		"info_reply": {msg: &InfoReply{Instance: "inst-1", Models: []*ModelInfo{{Name: "tuft/tiny", Arch: "llama", VocabSize: 512, MaxContextLength: 1024,
			Signature: "sig-1", Config: FromConfig(cfg), TokenizerJson: []byte(`{"model":{}}`), ChatTemplate: "{{ messages }}", KvCacheTokens: 4096}}},
			back: func(m proto.Message) (any, error) { return ToConfig(m.(*InfoReply).Models[0].Config), nil }, want: cfg},
		"create_adapter_request": {msg: &CreateAdapterRequest{Adapter: ref, Config: FromLoraConfig(lora)},
			back: func(m proto.Message) (any, error) { return ToLoraConfig(m.(*CreateAdapterRequest).Config), nil }, want: lora},
		"adapter_ref": {msg: ref},
		"forward_backward_request": {msg: FromForwardRequest(ref, fwd),
			back: func(m proto.Message) (any, error) { return ToForwardRequest(m.(*ForwardBackwardRequest)) }, want: fwd},
		"forward_backward_reply": {msg: FromForwardResult(fres),
			back: func(m proto.Message) (any, error) { return ToForwardResult(m.(*ForwardBackwardReply)) }, want: fres},
		"optim_step_request": {msg: &OptimStepRequest{Adapter: ref, Params: FromAdamParams(adam)},
			back: func(m proto.Message) (any, error) { return ToAdamParams(m.(*OptimStepRequest).Params), nil }, want: adam},
		"optim_step_reply": {msg: &OptimStepReply{Metrics: map[string]float64{"grad_norm:mean": 0.5}}},
		"optim_step_dimuon_request": {msg: FromStepParams(ref, dimuon),
			back: func(m proto.Message) (any, error) { return ToStepParams(m.(*OptimStepRequest)) }, want: dimuon},
		"create_adapter_dimuon_request": {msg: &CreateAdapterRequest{Adapter: ref, Config: FromLoraConfig(dimuonLora)},
			back: func(m proto.Message) (any, error) { return ToLoraConfig(m.(*CreateAdapterRequest).Config), nil }, want: dimuonLora},
		"forward_backward_text_config_request": {msg: FromForwardRequest(ref, textFwd),
			back: func(m proto.Message) (any, error) { return ToForwardRequest(m.(*ForwardBackwardRequest)) }, want: textFwd},
		"state_request_dimuon": {msg: &StateRequest{Adapter: ref, Dir: "/ckpt/run-1/weights/step-4", OptimizerConfig: FromOptimizerConfig(dimuonLora.Optimizer)},
			back: func(m proto.Message) (any, error) { return ToOptimizerConfig(m.(*StateRequest).OptimizerConfig), nil }, want: dimuonLora.Optimizer},
		"state_request": {msg: &StateRequest{Adapter: ref, Dir: "/ckpt/run-1/weights/step-4", Optimizer: true}},
		"sample_request": {msg: FromSampleRequest(ref, sreq),
			back: func(m proto.Message) (any, error) { return ToSampleRequest(m.(*SampleRequest)), nil }, want: sreq},
		"sample_reply": {msg: FromSampleResult(sres),
			back: func(m proto.Message) (any, error) { return ToSampleResult(m.(*SampleReply)), nil }, want: sres},
		"sample_stream_request": {msg: &SampleStreamRequest{Request: FromSampleRequest(ref, sreq), TopLogprobs: 2}},
		"sample_event_token": {msg: &SampleEvent{Event: &SampleEvent_Token{Token: FromTokenEvent(tok)}},
			back: func(m proto.Message) (any, error) { return ToTokenEvent(m.(*SampleEvent).GetToken()), nil }, want: tok},
		"sample_event_result": {msg: &SampleEvent{Event: &SampleEvent_Result{Result: FromSampleResult(sres)}}},
	}
}

func TestGoldenMessages(t *testing.T) {
	dir := filepath.Join("testdata", "golden")
	cases := goldenCases()
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".pb")
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c.msg)
			if err != nil {
				t.Fatal(err)
			}
			if check.Update() {
				check.WriteGolden(t, path, b)
				return
			}
			golden, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./backend/workerpb -run Golden -update to create it)", err)
			}
			// Message for message: equal messages may encode differently across protobuf
			// releases; unknown fields (a renumbered one) make them unequal.
			got := c.msg.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(golden, got); err != nil {
				t.Fatalf("the golden does not decode: %v", err)
			}
			if !proto.Equal(got, c.msg) {
				t.Fatalf("%s differs from the golden (review, then -update):\n got: %s\nwant: %s", path, prototext.Format(c.msg), prototext.Format(got))
			}
			if c.back != nil {
				v, err := c.back(got)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(v, c.want) {
					t.Fatalf("the golden reads back as\n%+v\nwant\n%+v", v, c.want)
				}
			}
		})
	}
	check.NoStaleGoldens(t, dir, func(name string) bool {
		_, ok := cases[name[:len(name)-len(filepath.Ext(name))]]
		return ok
	})
}
