package wire

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/tuft-go/tuft/api/wire/tinkerpb"
	"github.com/tuft-go/tuft/internal/testenv/check"
)

// Golden files of the wire formats, under testdata/golden:
//
//   - requests/sdk-<release>/<route>.json|.pb: request bodies as a Tinker SDK release
//     sends them, written by that SDK (testdata/sdk_goldens.py write), never by this test.
//     Each decodes as the server decodes it, into <file>.decoded.json beside it.
//   - responses/<name>.json|.pb: the server's encoding of fixed values, compared byte for
//     byte (JSON) or message for message (protobuf). testdata/sdk_goldens.py check reads
//     each with the SDK.
//
// go test ./api/wire -run Golden -update rewrites the .decoded.json and responses files
// from the current code; review the diff, then run the SDK check.

// decodeRequest decodes an SDK request body as the route's handler does.
func decodeRequest(route string, body []byte) (any, error) {
	var v any
	switch route {
	case "forward_backward.pb", "forward_backward_ppo.pb", "forward.pb":
		return DecodeForwardBackwardProto(body)
	case "forward_backward.json", "forward.json":
		return DecodeForwardBackwardJSON(body, route == "forward.json")
	case "asample.json":
		return DecodeSampleRequest(body)
	case "telemetry.json": // the intake takes what a newer SDK adds (api/routes.go)
		var r TelemetrySendRequest
		return &r, DecodeJSON(body, &r)
	case "create_session.json":
		v = &CreateSessionRequest{}
	case "session_heartbeat.json":
		v = &SessionHeartbeatRequest{}
	case "create_sampling_session.json":
		v = &CreateSamplingSessionRequest{}
	case "create_model.json":
		v = &CreateModelRequest{}
	case "get_info.json":
		v = &GetInfoRequest{}
	case "unload_model.json":
		v = &UnloadModelRequest{}
	case "optim_step.json":
		v = &OptimStepRequest{}
	case "save_weights.json":
		v = &SaveWeightsRequest{}
	case "save_weights_for_sampler.json":
		v = &SaveWeightsForSamplerRequest{}
	case "load_weights.json":
		v = &LoadWeightsRequest{}
	case "retrieve_future.json":
		v = &FutureRetrieveRequest{}
	case "create_model_dimuon.json":
		v = &CreateModelRequest{}
	case "optim_step_dimuon.json":
		var r OptimStepRequest
		if err := DecodeRequest(body, &r); err != nil {
			return nil, err
		}
		return r.OptimParams()
	case "save_weights_for_sampler_inflight.json":
		v = &SaveWeightsForSamplerRequest{}
	case "save_weights_external.json":
		v = &SaveWeightsExternalRequest{}
	case "retrieve_futures.json":
		v = &FuturesRetrieveRequest{}
	case "join_sampling_session.json":
		v = &JoinSamplingSessionRequest{}
	case "copy_weights.json":
		v = &CopyWeightsRequest{}
	case "sessions_search.json":
		v = &SessionSearchRequest{}
	default:
		return nil, nil
	}
	return v, DecodeRequest(body, v)
}

func TestGoldenRequestsDecode(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "requests", "sdk-*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	routes := 0
	for _, path := range files {
		if strings.HasSuffix(path, ".decoded.json") {
			continue
		}
		t.Run(strings.TrimPrefix(path, filepath.Join("testdata", "golden", "requests")+string(filepath.Separator)), func(t *testing.T) {
			body, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			v, err := decodeRequest(filepath.Base(path), body)
			if v == nil && err == nil {
				t.Fatalf("no decoder for %s: add its route to decodeRequest", filepath.Base(path))
			}
			if err != nil {
				t.Fatalf("the server refuses what the SDK sends: %v", err)
			}
			got, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			check.Golden(t, path+".decoded.json", append(got, '\n'))
			routes++
		})
	}
	if routes < 20 {
		t.Fatalf("only %d request goldens decoded: run testdata/sdk_goldens.py write", routes)
	}
}

// goldenResponses are the server's replies, each as the server encodes it.
func goldenResponses(t *testing.T) map[string][]byte {
	t.Helper()
	str := func(s string) *string { return &s }
	i := func(n int) *int { return &n }
	b := func(v bool) *bool { return &v }
	at := time.Date(2026, 11, 1, 12, 30, 0, 0, time.UTC)
	expires := at.Add(24 * time.Hour)
	size := int64(4096)
	lastLoss := 1.25
	rate, cost, gbh := 0.0, 0.0, 0.25
	n96, n8 := int64(96), int64(8)
	ckpt := Checkpoint{CheckpointID: "weights/step-4", CheckpointType: "training", Time: at, TinkerPath: "tinker://run-1/weights/step-4",
		SizeBytes: &size, ExpiresAt: &expires, UserMetadata: map[string]string{"stage": "sft"}}
	run := TrainingRun{TrainingRunID: "run-1", BaseModel: "tuft/tiny", ModelOwner: "alice", IsLora: true, LoraRank: i(8),
		LastRequestTime: at, LastCheckpoint: &ckpt, Steps: 4, LastLoss: &lastLoss, State: "ready", SessionID: "sess-1", CreatedAt: at.Add(-time.Hour)}
	jsons := map[string]any{
		"client_config":           ServerClientConfig(),
		"client_dynamic_config":   ServerDynamicConfig(),
		"healthz":                 HealthResponse{Status: "ok"},
		"get_server_capabilities": GetServerCapabilitiesResponse{SupportedModels: []SupportedModel{{ModelName: str("tuft/tiny"), MaxContextLength: i(1024), Trainable: b(true), Sampleable: b(true)}}},
		"create_session":          CreateSessionResponse{SessionID: "sess-1", Type: "create_session"},
		"session_heartbeat":       SessionHeartbeatResponse{Type: "session_heartbeat"},
		"create_sampling_session": CreateSamplingSessionResponse{SamplingSessionID: "samp-1", Type: "create_sampling_session"},
		"get_sampler":             GetSamplerResponse{SamplerID: "samp-1", BaseModel: "tuft/tiny", ModelPath: str("tinker://run-1/sampler_weights/s-5")},
		"untyped_future":          UntypedAPIFuture{RequestID: "req_1", ModelID: str("run-1")},
		"asample_future":          UntypedAPIFuture{RequestID: "req_2", SampleSequenceIDs: SampleSequenceIDs("req_2", 2)},
		"create_model_result":     CreateModelResponse{ModelID: "run-1", Type: "create_model"},
		"get_info": GetInfoResponse{ModelID: "run-1", ModelData: ModelData{Arch: str("llama"), ModelName: str("tuft/tiny"), TokenizerID: str("tuft/tiny")},
			IsLora: b(true), LoraRank: i(8), ModelName: str("tuft/tiny"), OptimizerConfig: &OptimizerConfig{Type: "adamw"}, Type: "get_info"},
		"unload_model_result": UnloadModelResponse{ModelID: "run-1", Type: "unload_model"},
		"weights_info": WeightsInfoResponse{BaseModel: "tuft/tiny", OptimizerConfig: &OptimizerConfig{Type: "adamw"}, IsLora: true, LoraRank: i(8),
			TrainUnembed: b(false), TrainMLP: b(true), TrainAttn: b(true)},
		"optim_step_result":               OptimStepResponse{Metrics: Metrics{"grad_norm:mean": 0.5, "learning_rate:mean": 1e-4}},
		"save_weights_result":             SaveWeightsResponse{Path: "tinker://run-1/weights/step-4", Type: "save_weights"},
		"save_weights_for_sampler_result": SaveWeightsForSamplerResponse{Path: str("tinker://run-1/sampler_weights/s-5"), Type: "save_weights_for_sampler"},
		"load_weights_result":             LoadWeightsResponse{Path: str("tinker://run-1/weights/step-4"), ModelID: str("run-1"), Type: "load_weights"},
		"try_again":                       TryAgainResponse{Type: "try_again", RequestID: "req_1", QueueState: "paused_capacity"},
		"request_failed":                  RequestFailedResponse{Error: "unknown loss_fn \"nope\"", Category: "user"},
		"telemetry":                       TelemetryResponse{Status: "accepted"},
		"training_runs":                   TrainingRunsResponse{TrainingRuns: []TrainingRun{run}, Cursor: Cursor{Limit: 20, TotalCount: 1}},
		"training_run":                    run,
		"checkpoints":                     CheckpointsListResponse{Checkpoints: []Checkpoint{ckpt}, Cursor: &Cursor{Limit: 100, TotalCount: 1}},
		"archive_url":                     ArchiveURLResponse{URL: "http://127.0.0.1:10610/api/v1/archive/tok", Expires: expires},
		"list_sessions":                   ListSessionsResponse{Sessions: []string{"sess-1"}},
		"get_session":                     GetSessionResponse{TrainingRunIDs: []string{"run-1"}, SamplerIDs: []string{"samp-1"}, DisplayName: str("golden"), Status: SessionStatus{Type: "active"}},
		"get_info_dimuon": GetInfoResponse{ModelID: "run-1", ModelData: ModelData{Arch: str("llama"), ModelName: str("tuft/tiny"), TokenizerID: str("tuft/tiny")},
			IsLora: b(true), LoraRank: i(8), ModelName: str("tuft/tiny"), OptimizerConfig: EchoOptimizer("dimuon"), Type: "get_info"},
		"save_weights_external_result": SaveWeightsExternalResponse{Path: "tinker://run-1/external_weights/download", SizeBytes: &size, Type: "save_weights_external"},
		"external_weights_urls": ExternalWeightsURLsResponse{URLs: map[string]string{"adapter_config.json.age": "http://127.0.0.1:10610/api/v1/external_weights/tok/adapter_config.json.age"},
			Expires: expires},
		"retrieve_futures":      FuturesRetrieveResponse{Completions: []FutureCompletion{{State: "finished", RequestID: "req_2", ResponsePayloadUncompressedSize: &size}, {State: "failed", RequestID: "req_3"}}, Cursor: 1795000000000001},
		"join_sampling_session": JoinSamplingSessionResponse{Type: "join_sampling_session", ClientCounter: 1},
		"copy_weights":          CopyWeightsResponse{TinkerPath: "tinker://copy_1/weights/step-4"},
		"sessions_search": SessionSearchResponse{Sessions: []SessionSummary{{SessionID: "sess-1", CreatedAt: at, Owner: "alice", ProjectID: "alice",
			Status: &SessionStatus{Type: "active"}, CheckpointsCount: 1, DisplayName: str("golden"), CheckpointStorageBytes: &size}},
			NextCursor: &SessionSearchCursor{LastCreatedAt: at, LastSessionID: "sess-1"}},
		"checkpoint_storage_usage": CheckpointStorageUsageResponse{Data: []CheckpointStorageUsageItem{{ProjectID: str("alice"), OrgUserURN: str("alice"),
			UserName: str("alice"), CheckpointCount: 1, SizeBytes: size, SizeGigabytes: float64(size) / 1e9}}},
		"billing_usage_events": BillingUsageResponse{Data: []BillingUsageEvent{
			{BucketStart: at.Truncate(time.Hour), BucketEnd: at.Truncate(time.Hour).Add(time.Hour), BaseModel: str("tuft/tiny"), UserID: str("alice"), UserName: str("alice"),
				SessionID: str("sess-1"), EstimatedCostUSD: &cost, EffectiveRateUSDPerMillionTokens: &rate, EventInfo: BillingEventInfo{Type: "training", TokenCount: &n96}},
			{BucketStart: at.Truncate(time.Hour), BucketEnd: at.Truncate(time.Hour).Add(time.Hour), BaseModel: str("tuft/tiny"), UserID: str("alice"), UserName: str("alice"),
				SessionID: str("sess-1"), EstimatedCostUSD: &cost, EffectiveRateUSDPerMillionTokens: &rate, EventInfo: BillingEventInfo{Type: "sampling_prefill", Cached: b(true), TokenCount: &n8}},
			{BucketStart: at.Truncate(time.Hour), BucketEnd: at.Truncate(time.Hour).Add(time.Hour), UserID: str("alice"), UserName: str("alice"),
				EstimatedCostUSD: &cost, EffectiveRateUSDPerGigabyteMonth: &rate, EventInfo: BillingEventInfo{Type: "storage", Free: b(false), GigabyteHours: &gbh}}},
			Sessions: map[string]BillingUsageSession{"sess-1": {UserMetadata: map[string]string{"purpose": "golden"}}}},
		"apikey_me": SelfAPIKeyResponse{KeyID: 42, Name: "alice key 0123456789ab", Note: "configured in the server's config (auth.api_keys)",
			Details: APIKeyDetails{OrgDetails: APIKeyOrgDetails{Name: "alice"}, UserDetails: APIKeyUserDetails{Email: "alice"}}},
	}
	out := map[string][]byte{}
	for name, v := range jsons {
		b, err := json.Marshal(v) // as api's writeJSON and jsonResult do
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name+".json"] = b
	}

	fwd := ForwardBackwardOutput{Metrics: map[string]float64{"loss:sum": 3.25},
		LossFnOutputs: []map[string]Tensor{
			{"logprobs": {DType: Float32, Shape: []int{3}, F32: []float32{-0.5, -1.25, -2}},
				"elementwise_loss": {DType: Float32, Shape: []int{3}, F32: []float32{0.5, 1.25, 2}}},
			{"logprobs": {DType: Float32, Shape: []int{2}, F32: []float32{-0.25, -4}},
				"elementwise_loss": {DType: Float32, Shape: []int{2}, F32: []float32{0.25, 4}}},
		}}
	pb, err := EncodeForwardBackwardOutputProto(fwd, "cross_entropy")
	if err != nil {
		t.Fatal(err)
	}
	out["forward_backward_result.pb"] = pb
	if out["forward_backward_result.json"], err = ForwardBackwardOutputProtoToJSON(pb); err != nil {
		t.Fatal(err)
	}
	nan := float32(0)
	nan /= nan // the first prompt token has no logprob
	smp := SampleResponse{
		Sequences: []Sequence{
			{Tokens: []int32{5, 6, 7}, Logprobs: []float32{-0.5, -0.75, -1}, StopReason: StopReasonLength},
			{Tokens: []int32{8}, Logprobs: []float32{-0.125}, StopReason: StopReasonStop},
		},
		PromptLogprobs: []float32{nan, -2.5, -3},
		TopKPrompt:     [][]TokenLogprob{nil, {{Token: 2, Logprob: -2.5}, {Token: 9, Logprob: -3.5}}, {{Token: 3, Logprob: -3}, {Token: 1, Logprob: -4}}},
	}
	if pb, err = EncodeSampleResponseProto(smp); err != nil {
		t.Fatal(err)
	}
	out["sample_result.pb"] = pb
	if out["sample_result.json"], err = SampleResponseProtoToJSON(pb); err != nil {
		t.Fatal(err)
	}
	// The newer outputs (sdk_goldens.py checks the values the SDK reads from these):
	// top-k of sampled tokens, target prompt logprobs in CSR (and dense) form, and
	// alternative prompt tokens.
	outs := SampleResponse{
		Sequences: []Sequence{
			{Tokens: []int32{5, 6}, Logprobs: []float32{-0.5, -0.75}, StopReason: StopReasonLength,
				TopK: [][]TokenLogprob{{{Token: 5, Logprob: -0.5}, {Token: 1, Logprob: -1.25}}, {{Token: 2, Logprob: -0.25}, {Token: 6, Logprob: -0.75}}}},
		},
		PromptTargetLogprobs: &PromptTargetLogprobs{Rows: 2, Cols: 3, Logprobs: []float32{-2.5, -3, -0.5},
			RowStarts: []int{0, 1, 3}, ColIdx: []int{0, 0, 2}},
		PromptAltTokens: &PromptAltTokens{K: 2, Tokens: []int32{4, 9, 3, 3}, Logprobs: []float32{-1.5, -2, -0.25, -0.25}},
	}
	if out["sample_outputs.pb"], err = EncodeSampleResponseProto(outs); err != nil {
		t.Fatal(err)
	}
	if out["sample_outputs.json"], err = SampleResponseProtoToJSON(out["sample_outputs.pb"]); err != nil {
		t.Fatal(err)
	}
	outs.PromptTargetLogprobs = &PromptTargetLogprobs{Rows: 2, Cols: 3, Logprobs: []float32{-2.5, 0, 0, -3, 0, -0.5}}
	if out["sample_outputs_dense.pb"], err = EncodeSampleResponseProto(outs); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGoldenResponsesEncode(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "golden", "responses")
	got := goldenResponses(t)
	for name, b := range got {
		t.Run(name, func(t *testing.T) {
			if filepath.Ext(name) == ".pb" {
				compareProtoGolden(t, filepath.Join(dir, name), b)
				return
			}
			check.Golden(t, filepath.Join(dir, name), b)
		})
	}
	// A golden whose reply is no longer built is stale: the SDK check would vouch for a
	// reply the server does not send.
	check.NoStaleGoldens(t, dir, func(name string) bool { _, ok := got[name]; return ok })
}

// compareProtoGolden compares a protobuf reply with its golden message for message (the
// encoding of equal messages may differ between protobuf releases).
func compareProtoGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if check.Update() {
		check.WriteGolden(t, path, got)
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./api/wire -run Golden -update to create it)", err)
	}
	var g, w proto.Message
	if strings.HasPrefix(filepath.Base(path), "sample") {
		g, w = &tinkerpb.SampleResponse{}, &tinkerpb.SampleResponse{}
	} else {
		g, w = &tinkerpb.ForwardBackwardOutput{}, &tinkerpb.ForwardBackwardOutput{}
	}
	if err := proto.Unmarshal(got, g); err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(want, w); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if !proto.Equal(g, w) {
		t.Errorf("%s differs from the golden file (review, then -update):\n got: %s\nwant: %s", path, prototext.Format(g), prototext.Format(w))
	}
}
