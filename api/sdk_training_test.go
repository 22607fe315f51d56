package api_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tuft-go/tuft/api/wire/tinkerpb"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
)

// Training behaviour the SDK releases after 0.25 rely on (up to 0.38): creation from a
// checkpoint, optimizer settings, loss configuration, and seq_id order under refusals.

// trainTwoSteps runs two SFT steps (seq 1-4) and saves the state (seq 5).
func (h *harness) trainAndSave(model, name string) string {
	for seq := 1; seq <= 3; seq += 2 {
		var f, o future
		h.a.Post("/api/v1/forward_backward", fwdbwdJSON(model, seq, datum(1, 12), datum(40, 12)), &f)
		h.a.Post("/api/v1/optim_step", optim(model, seq+1, 1e-2), &o)
		h.a.Result(f.RequestID, nil)
		h.a.Result(o.RequestID, nil)
	}
	var sv future
	h.a.Post("/api/v1/save_weights", map[string]any{"model_id": model, "path": name, "seq_id": 5}, &sv)
	var saved struct{ Path string }
	h.a.Result(sv.RequestID, &saved)
	return saved.Path
}

// twoSteps continues a run from seq with two more steps and returns their losses.
func (h *harness) twoSteps(model string, seq int) []float64 {
	var out []float64
	for i := 0; i < 2; i++ {
		var f, o future
		h.a.Post("/api/v1/forward_backward", fwdbwdJSON(model, seq, datum(7, 12), datum(70, 12)), &f)
		h.a.Post("/api/v1/optim_step", optim(model, seq+1, 1e-2), &o)
		out = append(out, lossOf(h.t, h.a.Result(f.RequestID, nil)))
		h.a.Result(o.RequestID, nil)
		seq += 2
	}
	return out
}

// Create-via-load (SDK 0.38's create_training_client_from_state*): load_weights with
// session_id and model_seq_id creates the run from the checkpoint; the load is its seq 0,
// and with the optimizer state it continues exactly like the original.
func TestCreateViaLoad(t *testing.T) {
	t.Parallel()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	// The same weights under a second name (a compatible base_model override), and a
	// different model (an incompatible one).
	cfg.Models = append(cfg.Models, config.Model{Name: "tuft/tiny-long", Path: cfg.Models[0].Path, MaxContextLength: 64, MaxLoraRank: 32, LoraAlphaRatio: 1})
	other := variantOf(t, cfg.Models[0].Path)
	cfg.Models = append(cfg.Models, config.Model{Name: "tuft/other", Path: other, MaxLoraRank: 32, LoraAlphaRatio: 1})
	s := testenv.Start(t, cfg)
	h := &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	sess := h.session(h.a)
	orig := h.model(h.a, sess, 0, 8)
	path := h.trainAndSave(orig, "resume")

	load := map[string]any{"session_id": sess, "model_seq_id": 1, "path": path, "optimizer": true, "type": "load_weights"}
	var f1, f2 future
	h.a.Post("/api/v1/load_weights", load, &f1)
	h.a.Post("/api/v1/load_weights", load, &f2) // the SDK's retry: same payload, same future
	if f1.ModelID != sess+":train:1" || f2.RequestID != f1.RequestID {
		t.Fatalf("create-via-load futures: %+v %+v", f1, f2)
	}
	h.a.Result(f1.RequestID, nil)
	var info infoJSON
	h.a.Post("/api/v1/get_info", map[string]any{"model_id": f1.ModelID}, &info)
	if info.LoraRank != 8 || info.ModelData.ModelName != testenv.Model || info.OptimizerConfig["type"] != "adamw" {
		t.Fatalf("get_info of the loaded run: %+v", info)
	}
	// The load was seq 0: the next operation is seq 1, and it continues exactly.
	a, b := h.twoSteps(orig, 6), h.twoSteps(f1.ModelID, 1)
	if a[0] != b[0] || a[1] != b[1] {
		t.Fatalf("resumed run diverges: original %v, loaded %v", a, b)
	}

	// Weights only, with a compatible base model override and an explicit adamw.
	var f3 future
	h.a.Post("/api/v1/load_weights", map[string]any{"session_id": sess, "model_seq_id": 2, "path": path, "optimizer": false,
		"base_model": "tuft/tiny-long", "optimizer_config": map[string]any{"type": "adamw"}, "user_metadata": map[string]any{"k": "v"}}, &f3)
	h.a.Result(f3.RequestID, nil)
	h.a.Post("/api/v1/get_info", map[string]any{"model_id": f3.ModelID}, &info)
	if info.ModelData.ModelName != "tuft/tiny-long" {
		t.Fatalf("base model override: %+v", info)
	}
	var run struct {
		UserMetadata map[string]string `json:"user_metadata"`
		LoraRank     int               `json:"lora_rank"`
	}
	h.a.Do("GET", "/api/v1/training_runs/"+f3.ModelID, nil, nil).JSON(t, &run)
	if run.UserMetadata["k"] != "v" || run.LoraRank != 8 {
		t.Fatalf("run created by load: %+v", run)
	}

	// The legacy form (SDK <= 0.36): create_model, then load_weights with model_id, seq_id 1.
	legacy := h.model(h.a, sess, 3, 8)
	var lf future
	h.a.Post("/api/v1/load_weights", map[string]any{"model_id": legacy, "seq_id": 1, "path": path, "optimizer": true}, &lf)
	h.a.Result(lf.RequestID, nil)
	if c := h.twoSteps(legacy, 2); c[0] != a[0] || c[1] != a[1] {
		t.Fatalf("legacy resume diverges: original %v, legacy %v", a, c)
	}

	var sv future
	h.a.Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": orig, "path": "samp", "seq_id": 10}, &sv)
	var sampler struct{ Path string }
	h.a.Result(sv.RequestID, &sampler)
	bad := []struct {
		name string
		body map[string]any
		code int
		want string
	}{
		{"taken model_seq_id", map[string]any{"session_id": sess, "model_seq_id": 1, "path": path, "optimizer": false}, 409, "already exists"},
		{"incompatible base_model", map[string]any{"session_id": sess, "model_seq_id": 9, "path": path, "optimizer": true, "base_model": "tuft/other"}, 400, "tuft/other"},
		{"unknown base_model", map[string]any{"session_id": sess, "model_seq_id": 9, "path": path, "optimizer": true, "base_model": "nope"}, 400, "nope"},
		{"unknown optimizer", map[string]any{"session_id": sess, "model_seq_id": 9, "path": path, "optimizer": false, "optimizer_config": map[string]any{"type": "lion"}}, 400, "lion"},
		{"state of another optimizer", map[string]any{"session_id": sess, "model_seq_id": 9, "path": path, "optimizer": true, "optimizer_config": map[string]any{"type": "dimuon", "version": 1}}, 400, "dimuon"},
		{"sampler checkpoint with optimizer", map[string]any{"session_id": sess, "model_seq_id": 9, "path": sampler.Path, "optimizer": true}, 400, "optimizer state"},
		{"missing checkpoint", map[string]any{"session_id": sess, "model_seq_id": 9, "path": "tinker://" + orig + "/weights/nope", "optimizer": false}, 404, "not found"},
		{"both forms", map[string]any{"model_id": orig, "seq_id": 11, "session_id": sess, "model_seq_id": 9, "path": path, "optimizer": false}, 400, "not both"},
		{"neither form", map[string]any{"path": path, "optimizer": false}, 400, "model_id"},
		{"access token", map[string]any{"session_id": sess, "model_seq_id": 9, "path": path, "optimizer": false, "weights_access_token": "t"}, 400, "weights_access_token"},
		{"other tenant's session", map[string]any{"session_id": h.session(h.b), "model_seq_id": 9, "path": path, "optimizer": false}, 404, "not found"},
	}
	for _, tc := range bad {
		r := h.a.Do("POST", "/api/v1/load_weights", tc.body, nil)
		if r.Status != tc.code || !strings.Contains(string(r.Body), tc.want) {
			t.Errorf("%s: %d %s, want %d naming %q", tc.name, r.Status, r.Body, tc.code, tc.want)
		}
	}
}

// variantOf copies a model directory with a changed config.json: another model as far
// as compatibility goes (its signature differs).
func variantOf(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "variant")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "config.json" {
			var c map[string]any
			if err := json.Unmarshal(b, &c); err != nil {
				t.Fatal(err)
			}
			c["rms_norm_eps"] = 1e-3
			b, _ = json.Marshal(c)
		}
		if err := os.WriteFile(filepath.Join(out, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// optimizer_config and optimizer_params: adamw is honoured and echoed; every other
// family is refused by name.
func TestOptimizerConfigAndParams(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	sess := h.session(h.a)
	create := func(seq int, opt any) *testenv.Response {
		return h.a.Do("POST", "/api/v1/create_model", map[string]any{"session_id": sess, "model_seq_id": seq, "base_model": testenv.Model,
			"lora_config": map[string]any{"rank": 4}, "optimizer_config": opt}, nil)
	}
	if r := create(1, map[string]any{"type": "lion"}); r.Status != 400 || !strings.Contains(string(r.Body), "lion") {
		t.Fatalf("an unknown optimizer family: %d %s", r.Status, r.Body)
	}
	if r := create(1, map[string]any{"type": "adamw", "betas": 1}); r.Status != 400 || !strings.Contains(string(r.Body), "optimizer_config.betas") {
		t.Fatalf("adamw with a field: %d %s", r.Status, r.Body)
	}
	r := create(1, map[string]any{"type": "adamw"})
	var f future
	r.JSON(t, &f)
	h.a.Result(f.RequestID, nil)
	model := f.ModelID
	var info infoJSON
	h.a.Post("/api/v1/get_info", map[string]any{"model_id": model}, &info)
	if info.OptimizerConfig["type"] != "adamw" {
		t.Fatalf("get_info optimizer_config: %+v", info)
	}
	path := func() string {
		var sv future
		h.a.Post("/api/v1/save_weights", map[string]any{"model_id": model, "path": "o", "seq_id": 1}, &sv)
		var p struct{ Path string }
		h.a.Result(sv.RequestID, &p)
		return p.Path
	}()
	var wi struct {
		OptimizerConfig map[string]any `json:"optimizer_config"`
	}
	h.a.Post("/api/v1/weights_info", map[string]any{"tinker_path": path}, &wi)
	if wi.OptimizerConfig["type"] != "adamw" {
		t.Fatalf("weights_info optimizer_config: %+v", wi)
	}

	h.a.Post("/api/v1/forward_backward", fwdbwdJSON(model, 2, datum(1, 8)), &f)
	h.a.Result(f.RequestID, nil)
	step := func(seq int, params map[string]any) *testenv.Response {
		body := map[string]any{"model_id": model, "seq_id": seq, "type": "optim_step"}
		for k, v := range params {
			body[k] = v
		}
		return h.a.Do("POST", "/api/v1/optim_step", body, nil)
	}
	refused := []struct {
		params map[string]any
		want   string
	}{
		{map[string]any{"optimizer_params": map[string]any{"type": "dimuon", "learning_rate": 1e-3}}, "adamw"},
		{map[string]any{"optimizer_params": map[string]any{"type": "lion", "learning_rate": 1e-3}}, "lion"},
		{map[string]any{"optimizer_params": map[string]any{"learning_rate": 1e-3}}, "optimizer_params.type"},
		{map[string]any{"optimizer_params": map[string]any{"type": "adamw", "momentum": 0.9}}, "optimizer_params.momentum"},
		{map[string]any{"adam_params": map[string]any{"learning_rate": 1e-3}, "optimizer_params": map[string]any{"type": "adamw"}}, "one of"},
		{map[string]any{"adam_params": map[string]any{"learning_rate": 1e-3, "nesterov": true}}, "adam_params.nesterov"},
	}
	seq := 3
	for _, tc := range refused {
		if r := step(seq, tc.params); r.Status != 400 || !strings.Contains(string(r.Body), tc.want) {
			t.Errorf("optim_step %v: %d %s, want 400 naming %q", tc.params, r.Status, r.Body, tc.want)
		}
		seq++ // each refusal used its seq_id, as the SDK's did
	}
	// Adam parameters given as optimizer_params are honoured (the step reports its rate).
	r = step(seq, map[string]any{"optimizer_params": map[string]any{"type": "adamw", "learning_rate": 0.0125}})
	r.JSON(t, &f)
	var out struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	h.a.Result(f.RequestID, &out)
	if out.Metrics["learning_rate:max"] != 0.0125 {
		t.Fatalf("optimizer_params adamw not honoured: %v", out.Metrics)
	}
}

// fwdProto is a protobuf forward_backward body (the SDK's encoding) with the 0.38
// schema's extra fields set by mut.
func fwdProto(model string, seq int, mut func(*tinkerpb.ForwardBackwardRequest)) []byte {
	toks := func(xs ...int) []byte {
		b := make([]byte, 4*len(xs))
		for i, x := range xs {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
		}
		return b
	}
	tgt := make([]byte, 16)
	for i, x := range []int64{12, 13} {
		binary.LittleEndian.PutUint64(tgt[8*i:], uint64(x))
	}
	m := &tinkerpb.ForwardBackwardRequest{ModelId: model, SeqId: int32(seq), LossFn: "cross_entropy",
		Data: []*tinkerpb.Datum{{ModelInput: []*tinkerpb.Chunk{{Chunk: &tinkerpb.Chunk_EncodedText{EncodedText: &tinkerpb.EncodedTextChunk{Tokens: toks(11, 12)}}}},
			LossFnInputs: map[string]*tinkerpb.Tensor{"target_tokens": {Encoding: &tinkerpb.Tensor_Dense{Dense: tgt}, Dtype: tinkerpb.DType_DTYPE_INT64, Shape: []int64{2}}}}}}
	if mut != nil {
		mut(m)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// The done-when check of the SDK work: a request refused with a 400 is followed by a
// normal operation on the same run that runs at once. The refusal settled its seq_id, so
// the next operation's first long-poll already returns its result (a seq gap would hold
// it until sessions.seq_gap_timeout_seconds, set to an hour here).
func TestRefusalDoesNotHoldTheNextOperation(t *testing.T) {
	t.Parallel()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Sessions.SeqGapTimeoutSeconds = 3600
	s := testenv.Start(t, cfg)
	h := &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	model := h.model(h.a, h.session(h.a), 0, 4)
	pb := map[string]string{"Content-Type": "application/x-protobuf"}
	refusals := []struct {
		name, path string
		body       func(seq int) any
		header     map[string]string
		want       string
	}{
		{"unknown loss", "/api/v1/forward_backward", func(seq int) any {
			return map[string]any{"model_id": model, "seq_id": seq, "forward_backward_input": map[string]any{"data": []any{datum(1, 4)}, "loss_fn": "not_a_loss"}}
		}, nil, "not_a_loss"},
		{"stable_reinforce", "/api/v1/forward_backward", func(seq int) any {
			return fwdProto(model, seq, func(m *tinkerpb.ForwardBackwardRequest) { m.LossFn = "stable_reinforce" })
		}, pb, "stable_reinforce"},
		{"string loss config", "/api/v1/forward_backward", func(seq int) any {
			return fwdProto(model, seq, func(m *tinkerpb.ForwardBackwardRequest) {
				m.LossFnConfigV2 = map[string]*tinkerpb.LossConfigValue{"loss_id": {Value: &tinkerpb.LossConfigValue_Text{Text: "x"}}}
			})
		}, pb, "loss_id"},
		{"provenance spans that do not tile the input", "/api/v1/forward_backward", func(seq int) any {
			return fwdProto(model, seq, func(m *tinkerpb.ForwardBackwardRequest) {
				m.Data[0].ModelInputSpans = []*tinkerpb.ProvenanceSpan{{Span: &tinkerpb.ProvenanceSpan_PromptTokens{PromptTokens: &tinkerpb.PromptProvenanceSpan{SequenceId: "s", Length: 1}}}}
			})
		}, pb, "model_input_spans"},
		{"undecodable field", "/api/v1/optim_step", func(seq int) any {
			return map[string]any{"model_id": model, "seq_id": seq, "adam_params": map[string]any{"learning_rate": "fast"}}
		}, nil, "learning_rate"},
		{"dimuon step", "/api/v1/optim_step", func(seq int) any {
			return map[string]any{"model_id": model, "seq_id": seq, "optimizer_params": map[string]any{"type": "dimuon", "learning_rate": 1e-3}}
		}, nil, "dimuon"},
		{"save_weights_external to a bad recipient", "/api/v1/save_weights_external", func(seq int) any {
			return map[string]any{"model_id": model, "seq_id": seq, "path": "x", "type": "save_weights_external", "age_encryption_recipients": []string{"age1x"}}
		}, nil, "age_encryption_recipients"},
		{"missing checkpoint", "/api/v1/load_weights", func(seq int) any {
			return map[string]any{"model_id": model, "seq_id": seq, "path": "tinker://" + model + "/weights/none", "optimizer": false}
		}, nil, "not found"},
	}
	seq := 1
	for _, tc := range refusals {
		r := h.a.Do("POST", tc.path, tc.body(seq), tc.header)
		if r.Status/100 != 4 || !strings.Contains(string(r.Body), tc.want) {
			t.Fatalf("%s: %d %s, want a 4xx naming %q", tc.name, r.Status, r.Body, tc.want)
		}
		seq++
		var f future
		h.a.Post("/api/v1/forward_backward", fwdbwdJSON(model, seq, datum(1, 8)), &f)
		seq++
		first := h.a.Do("POST", "/api/v1/retrieve_future", map[string]any{"request_id": f.RequestID}, nil)
		if first.Status != 200 || strings.Contains(string(first.Body), `"error"`) {
			t.Fatalf("after %s: the next operation did not run at once: %d %s", tc.name, first.Status, first.Body)
		}
	}
}

// loss_fn_config_v2 (SDK >= 0.26.2 writes numbers to it beside loss_fn_config, and alone
// for string values): numbers are honoured, the same as in loss_fn_config; a value that
// contradicts loss_fn_config is refused.
func TestLossConfigV2NumbersAndStrings(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	sess := h.session(h.a)
	pb := map[string]string{"Content-Type": "application/x-protobuf"}
	loss := func(model string, mut func(*tinkerpb.ForwardBackwardRequest)) (float64, *testenv.Response) {
		r := h.a.Do("POST", "/api/v1/forward_backward", fwdProto(model, 1, func(m *tinkerpb.ForwardBackwardRequest) {
			m.LossFn = "dro"
			m.ForwardOnly = true
			adv := make([]byte, 8)
			binary.LittleEndian.PutUint32(adv, math.Float32bits(1))
			binary.LittleEndian.PutUint32(adv[4:], math.Float32bits(-0.5))
			lp := make([]byte, 8)
			m.Data[0].LossFnInputs["advantages"] = &tinkerpb.Tensor{Encoding: &tinkerpb.Tensor_Dense{Dense: adv}, Dtype: tinkerpb.DType_DTYPE_FLOAT32, Shape: []int64{2}}
			m.Data[0].LossFnInputs["logprobs"] = &tinkerpb.Tensor{Encoding: &tinkerpb.Tensor_Dense{Dense: lp}, Dtype: tinkerpb.DType_DTYPE_FLOAT32, Shape: []int64{2}}
			mut(m)
		}), pb)
		if r.Status != 200 {
			return 0, r
		}
		var f future
		r.JSON(t, &f)
		return lossOf(t, h.a.Result(f.RequestID, nil)), r
	}
	v1 := func(m *tinkerpb.ForwardBackwardRequest) { m.LossFnConfig = map[string]float64{"beta": 2} }
	v2 := func(m *tinkerpb.ForwardBackwardRequest) {
		m.LossFnConfigV2 = map[string]*tinkerpb.LossConfigValue{"beta": {Value: &tinkerpb.LossConfigValue_Number{Number: 2}}}
	}
	dflt := func(*tinkerpb.ForwardBackwardRequest) {}
	a, _ := loss(h.model(h.a, sess, 0, 4), v1)
	b, _ := loss(h.model(h.a, sess, 1, 4), v2)
	c, _ := loss(h.model(h.a, sess, 2, 4), dflt)
	if a != b || a == c {
		t.Fatalf("dro loss with beta 2 in loss_fn_config %v, in loss_fn_config_v2 %v, default beta %v", a, b, c)
	}
	_, r := loss(h.model(h.a, sess, 3, 4), func(m *tinkerpb.ForwardBackwardRequest) {
		v1(m)
		m.LossFnConfigV2 = map[string]*tinkerpb.LossConfigValue{"beta": {Value: &tinkerpb.LossConfigValue_Number{Number: 3}}}
	})
	if r.Status != 400 || !strings.Contains(string(r.Body), "contradicts") {
		t.Fatalf("contradicting configs: %d %s", r.Status, r.Body)
	}
	// String values are parsed and handed to the loss, which takes only the string keys
	// it defines (none of TuFT's losses defines one: engine's TestLossTextConfig shows
	// one that does); the refusal names the key and settles the seq_id.
	text := func(k, v string) func(*tinkerpb.ForwardBackwardRequest) {
		return func(m *tinkerpb.ForwardBackwardRequest) {
			m.LossFnConfigV2 = map[string]*tinkerpb.LossConfigValue{k: {Value: &tinkerpb.LossConfigValue_Text{Text: v}}}
		}
	}
	for _, tc := range []struct {
		mut  func(*tinkerpb.ForwardBackwardRequest)
		want string
	}{
		{text("loss_id", "l1"), `key \"loss_id\"`},
		{text("beta", "high"), `loss_fn_config[\"beta\"] must be a number`},
		{func(m *tinkerpb.ForwardBackwardRequest) { v1(m); text("beta", "x")(m) }, "contradicts"},
		{text("mode", strings.Repeat("x", 300)), "more than 256"},
	} {
		model := h.model(h.a, sess, 4, 4)
		if _, r := loss(model, tc.mut); r.Status != 400 || !strings.Contains(string(r.Body), tc.want) {
			t.Errorf("string config: %d %s, want 400 naming %s", r.Status, r.Body, tc.want)
		}
		sess = h.session(h.a)
	}
}

// The SDK reserves a seq_id before it validates a request, so an error on the client's
// side (SDK 0.18 checks loss_fn names itself) leaves a seq_id it never sends. The SDK
// sends a run's operations one after another, so the next one, arriving, says the gap
// is final: it runs at once. A client that is not the SDK may send out of order, and its
// gaps are waited for (TestOutOfOrderSubmissionRunsInSeqOrder).
func TestSDKSenderNeverWaitsForAnUnsentSeqID(t *testing.T) {
	t.Parallel()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Sessions.SeqGapTimeoutSeconds = 3600
	s := testenv.Start(t, cfg)
	h := &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	model := h.model(h.a, h.session(h.a), 0, 4)
	sdk := map[string]string{"User-Agent": "AsyncTinker/Python 0.18.2"}
	var f future
	h.a.Do("POST", "/api/v1/forward_backward", fwdbwdJSON(model, 1, datum(1, 8)), sdk).JSON(t, &f)
	h.a.Result(f.RequestID, nil)
	// seq 2 never comes.
	h.a.Do("POST", "/api/v1/forward_backward", fwdbwdJSON(model, 3, datum(1, 8)), sdk).JSON(t, &f)
	if r := h.a.Do("POST", "/api/v1/retrieve_future", map[string]any{"request_id": f.RequestID}, nil); r.Status != 200 {
		t.Fatalf("seq 3 after an unsent seq 2: %d %s", r.Status, r.Body)
	}
	// Another client's gap is waited for.
	h.a.Post("/api/v1/forward_backward", fwdbwdJSON(model, 5, datum(1, 8)), &f)
	if r := h.a.Do("POST", "/api/v1/retrieve_future", map[string]any{"request_id": f.RequestID}, nil); r.Status != http.StatusRequestTimeout {
		t.Fatalf("a non-SDK client's seq 5 before seq 4: %d %s", r.Status, r.Body)
	}
}
