package api_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/api/wire/tinkerpb"
	"github.com/tuft-go/tuft/internal/testenv"
)

// The field walk: every field of every request type that SDK 0.38 can send (listed from
// the wheel in testdata/sdk-0.38.0-requests.json by tests/conformance/sdk_request_fields.py)
// is honoured or refused, never ignored. Each field has an entry below:
//   - honoured: a named test shows the server acting on it;
//   - refused: a probe sends it with a non-default value and must get a 400 naming it;
//   - tag: it selects no behaviour (the request's type discriminator, a version string,
//     free-form values the server only records).
// A field without an entry, or an entry without a field, fails the test.

type fieldRule struct {
	honouredBy string                           // "TestName" or "pkgdir:TestName"
	refused    func(p *probe) *testenv.Response // a request using the field
	want       string                           // what the 400 must name
	tag        string                           // why the field selects no behaviour
}

func honoured(test string) fieldRule { return fieldRule{honouredBy: test} }
func tag(why string) fieldRule       { return fieldRule{tag: why} }
func refused(want string, f func(p *probe) *testenv.Response) fieldRule {
	return fieldRule{refused: f, want: want}
}

// probe holds what refusal probes address: a session, a run and a sampler of tenant A.
type probe struct {
	h              *harness
	sess, model, s string
	seq, other     int // the run's seq_ids; sampling seq_ids and model_seq_ids
}

func (p *probe) nextSeq() int { p.seq++; return p.seq }
func (p *probe) nextID() int  { p.other++; return p.other }

func (p *probe) sample(extra map[string]any) *testenv.Response {
	body := map[string]any{"sampling_session_id": p.s, "seq_id": p.nextID(), "num_samples": 1, "prompt": prompt(1, 2, 3),
		"sampling_params": map[string]any{"max_tokens": 2}}
	for k, v := range extra {
		body[k] = v
	}
	return p.h.a.Do("POST", "/api/v1/asample", body, nil)
}

func (p *probe) samplePrompt(chunk map[string]any) *testenv.Response {
	return p.sample(map[string]any{"prompt": map[string]any{"chunks": []any{chunk}}})
}

func (p *probe) fwd(mut func(*tinkerpb.ForwardBackwardRequest)) *testenv.Response {
	return p.h.a.Do("POST", "/api/v1/forward_backward", fwdProto(p.model, p.nextSeq(), mut), map[string]string{"Content-Type": "application/x-protobuf"})
}

var imageProbe = func(p *probe) *testenv.Response {
	return p.fwd(func(m *tinkerpb.ForwardBackwardRequest) {
		m.Data[0].ModelInput = append(m.Data[0].ModelInput, &tinkerpb.Chunk{Chunk: &tinkerpb.Chunk_Image{Image: &tinkerpb.ImageChunk{
			Data: []byte{1}, Format: "png", OverrideDimensions: &tinkerpb.ImageDimensions{Width: 2, Height: 2}}}})
	})
}

var dmelProbe = func(p *probe) *testenv.Response {
	return p.fwd(func(m *tinkerpb.ForwardBackwardRequest) {
		m.Data[0].ModelInput = append(m.Data[0].ModelInput, &tinkerpb.Chunk{Chunk: &tinkerpb.Chunk_Dmel{Dmel: &tinkerpb.DmelChunk{Dmel: []byte{1}}}})
	})
}

func endpoint(method, path, want string) fieldRule {
	return refused(want, func(p *probe) *testenv.Response { return p.h.a.Do(method, path, []byte(`{}`), nil) })
}

const typeTag = "the request's type discriminator"

func sdkFieldRules() map[string]fieldRule {
	r := map[string]fieldRule{}
	// Routes this server does not implement refuse every field of their requests, saying
	// why (docs/compatibility.md).
	for typ, rt := range map[string][3]string{
		"CreateCustomLossRequest": {"POST", "/api/v1/create_custom_loss", "custom_loss_server_side"},
		"CustomLossGraph":         {"POST", "/api/v1/create_custom_loss", "custom_loss_server_side"},
		"CustomLossInput":         {"POST", "/api/v1/create_custom_loss", "custom_loss_server_side"},
		"CustomLossNode":          {"POST", "/api/v1/create_custom_loss", "custom_loss_server_side"},
	} {
		r[typ+".*"] = endpoint(rt[0], rt[1], rt[2])
	}
	r["GetBillingUsageRequest.starting_on"] = honoured("TestUsageAndBillingEvents")
	r["GetBillingUsageRequest.ending_before"] = honoured("TestUsageAndBillingEvents")
	// Client telemetry is logged as it comes (tests/telemetry checks the records).
	for _, typ := range []string{"TelemetrySendRequest", "GenericEvent", "SessionEndEvent", "SessionStartEvent", "UnhandledExceptionEvent"} {
		r[typ+".*"] = honoured("TestClientTelemetryBecomesLogRecords")
	}
	set := func(keys string, rule fieldRule) {
		for _, k := range strings.Fields(keys) {
			r[k] = rule
		}
	}
	set("FuturesRetrieveRequest.prev_cursor FuturesRetrieveRequest.target FuturesRetrieveRequest.timeout SamplingSessionFuturesTarget.cloned_sampler_id "+
		"SamplingSessionFuturesTarget.sampling_session_id SamplingSessionFuturesTarget.type JoinSamplingSessionRequest.sampling_session_id",
		honoured("TestRetrieveFuturesAndJoin"))
	set("FuturesRetrieveRequest.retrieved_request_ids", tag("a permission to drop results early; they stay retrievable for persistence.future_ttl_seconds (at most limits.max_retrieved_request_ids per poll)"))
	set("JoinSamplingSessionRequest.type SaveWeightsExternalRequest.type", tag(typeTag))
	set("SaveWeightsExternalRequest.age_encryption_recipients SaveWeightsExternalRequest.model_id SaveWeightsExternalRequest.path "+
		"SaveWeightsExternalRequest.seq_id SaveWeightsExternalRequest.ttl_seconds", honoured("TestSaveWeightsExternal"))
	set("CopyWeightsRequest.destination_project_id CopyWeightsRequest.model_seq_id CopyWeightsRequest.session_id CopyWeightsRequest.source_path "+
		"CopyWeightsRequest.ttl_seconds", honoured("TestCopyWeights"))
	set("CopyWeightsRequest.weights_access_token", refused("weights_access_token", func(p *probe) *testenv.Response {
		return p.h.a.Do("POST", "/api/v1/copy_weights", map[string]any{"source_path": "tinker://x/weights/y", "destination_project_id": "alice",
			"weights_access_token": "tok"}, nil)
	}))
	set("SessionSearchRequest.cursor SessionSearchRequest.display_name SessionSearchRequest.limit SessionSearchRequest.owner SessionSearchRequest.project_ids "+
		"SessionSearchRequest.session_id SessionSearchRequest.statuses SessionSearchRequest.user_metadata SessionSearchCursor.last_created_at "+
		"SessionSearchCursor.last_session_id AccessibleSearchOwner.type OwnSearchOwner.type UserSearchOwner.type UserSearchOwner.owner_urns "+
		"ActiveSessionStatusQuery.type CancelledSessionStatusQuery.type ClientFinishedSessionStatusQuery.type ClientFinishedSessionStatusQuery.reasons "+
		"FailedSessionStatusQuery.type GetCurrentCheckpointStorageUsageRequest.project_id", honoured("TestSessionSearchStorageAndAPIKey"))
	set("AdamParams.learning_rate AdamOptimizerConfig.type OptimStepRequest.optim_params OptimParamsBase.type OptimizerConfigBase.type "+
		"CreateModelRequest.optimizer_config", honoured("TestOptimizerConfigAndParams"))
	set("AdamParams.beta1 AdamParams.beta2 AdamParams.eps AdamParams.weight_decay AdamParams.grad_clip_norm", honoured("engine:TestMatchesPyTorchReference"))
	set("ClientConfigRequest.sdk_version", tag("every SDK gets the same client configuration"))
	set("CreateModelRequest.base_model CreateModelRequest.lora_config CreateModelRequest.model_seq_id CreateModelRequest.session_id "+
		"LoraConfig.rank LoraConfig.train_attn LoraConfig.train_mlp LoraConfig.train_unembed LoraConfig.seed", honoured("TestSFTFlowOverJSON"))
	set("CreateModelRequest.user_metadata", honoured("TestUserMetadataKindAndDisplayName"))
	set("CreateModelRequest.type CreateSamplingSessionRequest.type CreateSessionRequest.type GetInfoRequest.type LoadWeightsRequest.type "+
		"OptimStepRequest.type SampleRequest.type SaveWeightsForSamplerRequest.type SaveWeightsRequest.type SessionHeartbeatRequest.type "+
		"UnloadModelRequest.type EncodedTextChunk.type", tag(typeTag))
	set("CreateSamplingSessionRequest.base_model CreateSamplingSessionRequest.model_path CreateSamplingSessionRequest.sampling_session_seq_id "+
		"CreateSamplingSessionRequest.session_id", honoured("TestTenantIsolation"))
	set("CreateSessionRequest.display_name CreateSessionRequest.user_metadata", honoured("TestUserMetadataKindAndDisplayName"))
	set("CreateSessionRequest.project_id CreateSessionRequest.tags", tag("recorded with the session; no behaviour depends on it"))
	set("CreateSessionRequest.sdk_version", tag("recorded with the session and logged; selects no behaviour"))
	set("DimuonOptimizerConfig.type DimuonOptimizerConfig.version DimuonParams.type DimuonParams.learning_rate DimuonParams.grad_clip_norm "+
		"DimuonParams.beta1", honoured("TestDimuonThroughTheAPI"))
	set("DmelChunk.dmel DmelChunk.type", refused("dmel", func(p *probe) *testenv.Response {
		return p.samplePrompt(map[string]any{"type": "dmel", "dmel": "AAAA"})
	}))
	set("ImageChunk.data ImageChunk.expected_tokens ImageChunk.format ImageChunk.type", refused("image", func(p *probe) *testenv.Response {
		return p.samplePrompt(map[string]any{"type": "image", "data": "AAAA", "format": "png", "expected_tokens": 4})
	}))
	set("ImageAssetPointerChunk.expected_tokens ImageAssetPointerChunk.format ImageAssetPointerChunk.location ImageAssetPointerChunk.type",
		refused("image_asset_pointer", func(p *probe) *testenv.Response {
			return p.samplePrompt(map[string]any{"type": "image_asset_pointer", "location": "s3://x", "format": "png", "expected_tokens": 4})
		}))
	set("EncodedTextChunk.tokens ModelInput.chunks", honoured("TestSFTFlowOverJSON"))
	set("FutureRetrieveRequest.request_id", honoured("TestLongPollAnswers408WithQueueState"))
	set("FutureRetrieveRequest.allow_metadata_only", tag("it permits a metadata-only answer; the full result is always a valid one"))
	set("GetInfoRequest.model_id", honoured("TestCreateViaLoad"))
	set("LoadWeightsRequest.base_model LoadWeightsRequest.model_seq_id LoadWeightsRequest.session_id LoadWeightsRequest.optimizer "+
		"LoadWeightsRequest.optimizer_config LoadWeightsRequest.path LoadWeightsRequest.model_id LoadWeightsRequest.seq_id "+
		"LoadWeightsRequest.user_metadata", honoured("TestCreateViaLoad"))
	set("LoadWeightsRequest.weights_access_token", refused("weights_access_token", func(p *probe) *testenv.Response {
		return p.h.a.Do("POST", "/api/v1/load_weights", map[string]any{"session_id": p.sess, "model_seq_id": 90, "path": "tinker://x/weights/y",
			"optimizer": false, "weights_access_token": "tok"}, nil)
	}))
	set("OptimStepRequest.model_id OptimStepRequest.seq_id SessionHeartbeatRequest.session_id SaveWeightsRequest.model_id SaveWeightsRequest.seq_id "+
		"SaveWeightsRequest.path SaveWeightsForSamplerRequest.model_id SaveWeightsForSamplerRequest.seq_id SaveWeightsForSamplerRequest.path "+
		"SaveWeightsForSamplerRequest.sampling_session_seq_id SaveWeightsRequest.ttl_seconds SaveWeightsForSamplerRequest.ttl_seconds",
		honoured("TestSFTFlowOverJSON"))
	set("SaveWeightsRequest.overwrite SaveWeightsRequest.user_metadata SaveWeightsForSamplerRequest.user_metadata SaveWeightsForSamplerRequest.kind",
		honoured("TestUserMetadataKindAndDisplayName"))
	set("UnloadModelRequest.model_id", honoured("TestTenantIsolation"))
	set("SampleRequest.base_model SampleRequest.num_samples SampleRequest.prompt SampleRequest.sampling_params SampleRequest.sampling_session_id "+
		"SampleRequest.seq_id SampleRequest.prompt_logprobs SampleRequest.topk_prompt_logprobs SamplingParams.max_tokens SamplingParams.seed "+
		"SamplingParams.temperature SamplingParams.top_k SamplingParams.top_p", honoured("TestSFTFlowOverJSON"))
	set("SampleRequest.prompt_logprobs_last_n", honoured("TestPromptLogprobsLastN"))
	set("SamplingParams.stop", honoured("TestEmptyStopListRunsToMaxTokens"))
	set("SampleRequest.model_path", refused("model_path", func(p *probe) *testenv.Response {
		return p.h.a.Do("POST", "/api/v1/asample", map[string]any{"model_path": "tinker://x/sampler_weights/y", "num_samples": 1, "prompt": prompt(1, 2),
			"sampling_params": map[string]any{"max_tokens": 1}}, nil)
	}))
	set("SampleRequest.topk_sample_logprobs SampleRequest.target_prompt_logprobs SampleRequest.prompt_alt_tokens_k",
		honoured("TestSampleOutputsOverTheAPI"))
	set("SampleRequest.record_stability_info", refused("record_stability_info", func(p *probe) *testenv.Response {
		return p.sample(map[string]any{"record_stability_info": true})
	}))
	set("TensorData.data TensorData.dtype TensorData.shape TensorData.sparse_col_indices TensorData.sparse_crow_indices",
		honoured("api/wire:TestSparseCSRBecomesDense"))

	// The protobuf forward_backward request.
	set("pb:ForwardBackwardRequest.data pb:ForwardBackwardRequest.forward_only pb:ForwardBackwardRequest.loss_fn pb:ForwardBackwardRequest.loss_fn_config "+
		"pb:ForwardBackwardRequest.model_id pb:ForwardBackwardRequest.seq_id pb:Datum.loss_fn_inputs pb:Datum.model_input pb:Chunk.encoded_text "+
		"pb:EncodedTextChunk.tokens pb:Tensor.dense pb:Tensor.dtype pb:Tensor.shape pb:Tensor.sparse_csr pb:SparseCsr.values "+
		"pb:SparseCsr.crow_indices pb:SparseCsr.col_indices", honoured("api/wire:TestForwardBackwardProtoRoundTrip"))
	set("pb:ForwardBackwardRequest.loss_fn_config_v2 pb:LossConfigValue.number", honoured("TestLossConfigV2NumbersAndStrings"))
	// Parsed and handed to the loss; no implemented loss defines a string key, so a
	// string value is refused naming its key.
	set("pb:LossConfigValue.text", refused(`\"loss_id\"`, func(p *probe) *testenv.Response {
		return p.fwd(func(m *tinkerpb.ForwardBackwardRequest) {
			m.LossFnConfigV2 = map[string]*tinkerpb.LossConfigValue{"loss_id": {Value: &tinkerpb.LossConfigValue_Text{Text: "l"}}}
		})
	}))
	// Provenance spans are validated (they must tile their fields) and change no implemented
	// loss; the SDK sends them on every RL datum whatever the loss.
	set("pb:Datum.model_input_spans pb:ProvenanceSpan.sampled_tokens pb:SampledProvenanceSpan.sequence_id pb:SampledProvenanceSpan.offset "+
		"pb:SampledProvenanceSpan.length pb:Datum.loss_fn_input_spans pb:ProvenanceSpan.prompt_tokens pb:PromptProvenanceSpan.sequence_id "+
		"pb:PromptProvenanceSpan.offset pb:PromptProvenanceSpan.length", honoured("api/wire:TestProvenanceSpans"))
	set("pb:Chunk.image pb:ImageChunk.data pb:ImageChunk.format pb:ImageChunk.expected_tokens pb:ImageChunk.override_dimensions "+
		"pb:ImageDimensions.width pb:ImageDimensions.height", refused("encoded_text", imageProbe))
	set("pb:Chunk.dmel pb:DmelChunk.dmel", refused("encoded_text", dmelProbe))

	// Enumerated values.
	set("value:LossFnType.cross_entropy value:LossFnType.importance_sampling value:LossFnType.ppo value:LossFnType.cispo value:LossFnType.dro",
		honoured("TestSFTFlowOverJSON"))
	set("value:LossFnType.gspo", honoured("engine:TestGSPOGradientMatchesFiniteDifferencesOfItsSurrogate"))
	for _, loss := range []string{"stable_reinforce", "custom"} {
		loss := loss
		r["value:LossFnType."+loss] = refused(loss, func(p *probe) *testenv.Response {
			return p.fwd(func(m *tinkerpb.ForwardBackwardRequest) { m.LossFn = loss })
		})
	}
	set("value:SamplingClientKind.snapshot value:SamplingClientKind.inflight", honoured("TestInflightSamplersFollowTheRun"))
	return r
}

type sdkFields struct {
	SDKVersion string                       `json:"sdk_version"`
	JSON       map[string]map[string]string `json:"json"`
	Protobuf   map[string]map[string]int    `json:"protobuf"`
	Values     map[string][]string          `json:"values"`
}

func TestEverySDK038RequestFieldIsHonouredOrRefused(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/sdk-0.38.0-requests.json")
	if err != nil {
		t.Fatal(err)
	}
	var fields sdkFields
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for typ, fs := range fields.JSON {
		for f := range fs {
			keys = append(keys, typ+"."+f)
		}
	}
	for typ, fs := range fields.Protobuf {
		for f := range fs {
			keys = append(keys, "pb:"+typ+"."+f)
		}
	}
	for typ, vs := range fields.Values {
		for _, v := range vs {
			keys = append(keys, "value:"+typ+"."+v)
		}
	}
	sort.Strings(keys)
	rules := sdkFieldRules()
	used := map[string]bool{}
	rule := func(k string) (fieldRule, bool) {
		if r, ok := rules[k]; ok {
			used[k] = true
			return r, true
		}
		typ, _, _ := strings.Cut(k, ".")
		if r, ok := rules[typ+".*"]; ok {
			used[typ+".*"] = true
			return r, true
		}
		return fieldRule{}, false
	}

	h := newHarness(t, "memory")
	p := &probe{h: h, sess: h.session(h.a)}
	p.model = h.model(h.a, p.sess, 0, 4)
	p.s = h.sampler(h.a, p.sess, 0)
	tests := testNames(t)
	for _, k := range keys {
		r, ok := rule(k)
		switch {
		case !ok:
			t.Errorf("%s (SDK %s) has no rule: honour it (and name the test that shows it), refuse it, or say why it is a tag", k, fields.SDKVersion)
		case r.honouredBy != "":
			if !tests[r.honouredBy] {
				t.Errorf("%s: honoured by %s, which does not exist", k, r.honouredBy)
			}
		case r.refused != nil:
			resp := r.refused(p)
			if resp.Status != 400 || !strings.Contains(string(resp.Body), r.want) {
				t.Errorf("%s: %d %s, want 400 naming %q", k, resp.Status, resp.Body, r.want)
			}
		case r.tag == "":
			t.Errorf("%s: empty rule", k)
		}
	}
	for k := range rules {
		if !used[k] {
			t.Errorf("rule %s matches no field of SDK %s (stale)", k, fields.SDKVersion)
		}
	}
	// The probes refused operations with seq_ids: the run still works at once.
	var f future
	h.a.Post("/api/v1/forward_backward", fwdbwdJSON(p.model, p.nextSeq(), datum(1, 8)), &f)
	if r := h.a.Do("POST", "/api/v1/retrieve_future", map[string]any{"request_id": f.RequestID}, nil); r.Status != 200 {
		t.Fatalf("the run after the refusals: %d %s", r.Status, r.Body)
	}
}

// testNames lists the Test functions of this package and of the packages rules name.
func testNames(t *testing.T) map[string]bool {
	out := map[string]bool{}
	re := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	scan := func(prefix, dir string) {
		files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
		if len(files) == 0 {
			t.Fatalf("no test files in %s", dir)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllSubmatch(b, -1) {
				out[prefix+string(m[1])] = true
			}
		}
	}
	scan("", ".")
	for _, d := range []string{"api/wire", "engine"} {
		scan(d+":", filepath.Join("..", d))
	}
	return out
}
