package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestUndeclaredFieldsAreRefusedUnlessUnset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		want string // "" = accepted
	}{
		{`{"model_id":"m","future_flag":false,"future_list":[],"future_obj":{},"future_num":0,"future_str":"","future_null":null}`, ""},
		{`{"model_id":"m","future_flag":true}`, "future_flag"},
		{`{"model_id":"m","future_num":0.5}`, "future_num"},
		{`{"model_id":"m","future_list":[0]}`, "future_list"},
		{`{"model_id":"m","path":"p","user_metadata":{"a":"b"}}`, ""},
	} {
		var req SaveWeightsRequest
		err := DecodeRequest([]byte(tc.body), &req)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.want)
		}
	}
	// Nested objects and lists are walked too.
	var s SampleRequest
	err := DecodeRequest([]byte(`{"prompt":{"chunks":[{"type":"encoded_text","tokens":[1],"weight":2}]},"sampling_params":{"min_p":0.1}}`), &s)
	if err == nil || !strings.Contains(err.Error(), "prompt.chunks[0].weight") {
		t.Fatalf("nested: %v", err)
	}
	err = DecodeRequest([]byte(`{"prompt":{"chunks":[]},"sampling_params":{"min_p":0.1}}`), &s)
	if err == nil || !strings.Contains(err.Error(), "sampling_params.min_p") {
		t.Fatalf("nested params: %v", err)
	}
}

func TestOptimParamsForms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body   string
		family string
		lr     float64
		want   string
	}{
		{`{"model_id":"m"}`, "adamw", 1e-4, ""},
		{`{"model_id":"m","adam_params":{"learning_rate":0.5}}`, "adamw", 0.5, ""},
		{`{"model_id":"m","optimizer_params":{"type":"adamw","learning_rate":0.25}}`, "adamw", 0.25, ""},
		{`{"model_id":"m","optim_params":{"learning_rate":0.125}}`, "adamw", 0.125, ""},
		{`{"model_id":"m","optimizer_params":{"type":"dimuon","learning_rate":1}}`, "dimuon", 0, ""},
		{`{"model_id":"m","optimizer_params":{"type":"dimuon","learning_rate":1,"beta1":0.5,"grad_clip_norm":2,"damping":0.2,"rank_lr_correction_exponent":1}}`, "dimuon", 0, ""},
		{`{"model_id":"m","optimizer_params":{"type":"dimuon"}}`, "", 0, "optimizer_params.learning_rate"},
		{`{"model_id":"m","optimizer_params":{"type":"dimuon","learning_rate":1,"eps":1}}`, "", 0, "optimizer_params.eps"},
		{`{"model_id":"m","optimizer_params":{"type":"lion","learning_rate":1}}`, "lion", 0, ""},
		{`{"model_id":"m","optimizer_params":{"learning_rate":1}}`, "", 0, "optimizer_params.type"},
		{`{"model_id":"m","optimizer_params":{"type":"adamw","rho":1}}`, "", 0, "optimizer_params.rho"},
		{`{"model_id":"m","optimizer_params":{"type":"adamw","learning_rate":"x"}}`, "", 0, "learning_rate"},
		{`{"model_id":"m","adam_params":{},"optimizer_params":{"type":"adamw"}}`, "", 0, "one of"},
	} {
		var req OptimStepRequest
		err := DecodeRequest([]byte(tc.body), &req)
		var fam string
		var p AdamParams
		if err == nil {
			var sp StepParams
			sp, err = req.OptimParams()
			fam, p = sp.Family, sp.Adam
		}
		if tc.want != "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want an error naming %q", tc.body, err, tc.want)
			}
			continue
		}
		if err != nil || fam != tc.family || (fam == "adamw" && p.LearningRate != tc.lr) {
			t.Errorf("%s: %q %+v %v", tc.body, fam, p, err)
		}
	}
}

func TestOptimizerConfigFamily(t *testing.T) {
	t.Parallel()
	var r CreateModelRequest
	for body, want := range map[string]string{
		`{"optimizer_config":{"type":"adamw"}}`: "adamw",
		`{}`:                                    "",
		`{"optimizer_config":{"type":"dimuon","version":1}}`: "dimuon",
		`{"optimizer_config":{"type":"dimuon"}}`:             "dimuon",
		`{"optimizer_config":{"type":"muon"}}`:               "muon", // refused by the service, by name
	} {
		r = CreateModelRequest{}
		if err := DecodeRequest([]byte(body), &r); err != nil {
			t.Fatal(err)
		}
		if got, err := r.OptimizerConfig.Family("optimizer_config"); err != nil || got != want {
			t.Errorf("%s: %q %v", body, got, err)
		}
	}
	for body, want := range map[string]string{
		`{"optimizer_config":{"type":"adamw","lr":1}}`:         "optimizer_config.lr",
		`{"optimizer_config":{"version":1}}`:                   "optimizer_config.type",
		`{"optimizer_config":{"type":"dimuon","version":2}}`:   "optimizer_config.version",
		`{"optimizer_config":{"type":"dimuon","damping":0.1}}`: "optimizer_config.damping",
	} {
		r = CreateModelRequest{}
		err := DecodeRequest([]byte(body), &r)
		if err == nil {
			_, err = r.OptimizerConfig.Family("optimizer_config")
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"model_id":"m","seq_id":1,"optimizer_params":{"type":"adamw","learning_rate":0.1},"x":[{}]}`))
	f.Add([]byte(`{"session_id":"s","model_seq_id":1,"path":"tinker://a/weights/b","optimizer":true,"optimizer_config":{"type":"adamw"}}`))
	f.Add([]byte(`{"reason":{"type":"success"},"detail":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var o OptimStepRequest
		if DecodeRequest(data, &o) == nil {
			_, _ = o.OptimParams()
		}
		var l LoadWeightsRequest
		if DecodeRequest(data, &l) == nil {
			_, _ = l.OptimizerConfig.Family("optimizer_config")
		}
		var fin FinishSessionRequest
		_ = DecodeRequest(data, &fin)
		_, _, _ = OpAddress(data)
		_, _, _ = ForwardBackwardAddress(data, true)
		_ = zeroJSON(data)
	})
}

// A request built from AdamParams (as the Go client does) carries them as adam_params.
func TestOptimStepRequestMarshalsItsAdamParams(t *testing.T) {
	t.Parallel()
	seq := int64(3)
	b, err := json.Marshal(OptimStepRequest{AdamParams: AdamParams{LearningRate: 0.5, Beta1: 0.8}, ModelID: "m", SeqID: &seq})
	if err != nil {
		t.Fatal(err)
	}
	var back OptimStepRequest
	if err := DecodeRequest(b, &back); err != nil {
		t.Fatal(err)
	}
	sp, err := back.OptimParams()
	if err != nil || sp.Family != "adamw" || sp.Adam.LearningRate != 0.5 || sp.Adam.Beta1 != 0.8 || *back.SeqID != 3 {
		t.Fatalf("%s → %+v %v", b, sp, err)
	}
}

// OpAddress reads the address of a body Go's JSON decoder refuses (finding 6 of issue 22),
// and nothing from one whose address itself is unreadable.
func TestOpAddressOfMalformedBodies(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body  string
		model string
		seq   int64
		ok    bool
	}{
		{`{"model_id":"run-1","seq_id":7,"adam_params":{"learning_rate":NaN}}`, "run-1", 7, true},
		{`{"adam_params":{"eps":[Infinity,-Infinity]},"seq_id":3,"model_id":"r"}`, "r", 3, true},
		{` { "seq_id" : 12 , "model_id" : "a\"b" , "x": tru`, `a"b`, 12, true},
		{`{"model_id":"r","seq_id":NaN}`, "", 0, false},
		{`{"model_id":"r","seq_id":1.5}`, "", 0, false},
		{`{"model_id":"","seq_id":1}`, "", 0, false},
		{`{"model_id":7,"seq_id":1}`, "", 0, false},
		{`{"x":{"model_id":"r","seq_id":1}}`, "", 0, false},
		{`[{"model_id":"r","seq_id":1}]`, "", 0, false},
		{`{"model_id":,"seq_id":1}`, "", 0, false},
	} {
		m, s, ok := OpAddress([]byte(c.body))
		if m != c.model || s != c.seq || ok != c.ok {
			t.Errorf("OpAddress(%s) = %q, %d, %v; want %q, %d, %v", c.body, m, s, ok, c.model, c.seq, c.ok)
		}
	}
}
