package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/tuft-go/tuft/api/wire/tinkerpb"
)

// Every field a Tinker SDK sends is either honoured or refused with an error naming it,
// never silently ignored. The request types of this package declare every field of SDK
// 0.38 (api/testdata holds the list, and api's field-walk test checks each one). A field
// they do not declare (a newer SDK's) is accepted only while it holds its zero value
// (null, false, 0, "", [] or {}), which is what an SDK sends when the feature is not
// used; any other value is refused, so a feature this server lacks is never taken for
// granted.

// DecodeRequest decodes a JSON request body into v like DecodeJSON, then refuses the
// fields v does not declare that hold a non-zero value, naming them.
func DecodeRequest(b []byte, v any) error {
	if err := DecodeJSON(b, v); err != nil {
		return err
	}
	return checkUnknown(b, reflect.TypeOf(v), "")
}

// jsonFields maps a struct type's JSON names to their field types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(indirect(f.Type)) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func indirect(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

var rawMessage = reflect.TypeOf(json.RawMessage(nil))

// selfChecked is implemented by types whose UnmarshalJSON judges every field it is given
// (a JSON value that is not an object of declared fields).
type selfChecked interface{ checksOwnFields() }

func (*OptimizerConfig) checksOwnFields() {}
func (*Stop) checksOwnFields()            {}

// checkUnknown walks raw (a JSON value decoded into t) and refuses undeclared fields with
// non-zero values.
func checkUnknown(raw []byte, t reflect.Type, path string) error {
	t = indirect(t)
	if t == rawMessage || reflect.PointerTo(t).Implements(reflect.TypeOf((*selfChecked)(nil)).Elem()) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return nil // not an object (null): the decoder has judged it
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ft, ok := fields[k]
			if !ok {
				if !zeroJSON(obj[k]) {
					return errf(joinField(path, k), "is not supported by this server (a newer SDK feature); leave it out or unset")
				}
				continue
			}
			if err := checkUnknown(obj[k], ft, joinField(path, k)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil
		}
		for i, it := range items {
			if err := checkUnknown(it, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return nil
		}
		for k, it := range m {
			if err := checkUnknown(it, t.Elem(), fmt.Sprintf("%s[%q]", path, k)); err != nil {
				return err
			}
		}
	}
	return nil
}

func joinField(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// zeroJSON reports whether a JSON value is null, false, a zero number, "", [] or {}.
func zeroJSON(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	switch string(b) {
	case "null", "false", `""`, "[]", "{}":
		return true
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if dec.Decode(&n) == nil {
		f, err := n.Float64()
		return err == nil && f == 0
	}
	var arr []json.RawMessage
	if json.Unmarshal(b, &arr) == nil {
		return len(arr) == 0
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(b, &obj) == nil {
		return len(obj) == 0
	}
	return false
}

// OptimizerConfig is create_model's and load_weights' optimizer_config (SDK >= 0.29.1):
// the optimizer family, by type, and that family's fields.
type OptimizerConfig struct {
	Type   string
	Fields map[string]json.RawMessage // every field but type
}

// UnmarshalJSON keeps the type and the family's fields.
func (o *OptimizerConfig) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("optimizer_config must be an object with a type")
	}
	if raw, ok := m["type"]; ok {
		if err := json.Unmarshal(raw, &o.Type); err != nil {
			return fmt.Errorf("optimizer_config.type must be a string")
		}
	}
	delete(m, "type")
	o.Fields = m
	return nil
}

// MarshalJSON writes {"type": ..., fields...}.
func (o OptimizerConfig) MarshalJSON() ([]byte, error) {
	m := map[string]any{"type": o.Type}
	for k, v := range o.Fields {
		m[k] = v
	}
	return json.Marshal(m)
}

// Family returns the optimizer family of a config (nil: "", the server default). The
// adamw family has no fields; dimuon has its version, which must be 1 (absent: 1). Other
// families are returned as named for the service to refuse.
func (o *OptimizerConfig) Family(field string) (string, error) {
	if o == nil {
		return "", nil
	}
	switch o.Type {
	case "":
		return "", errf(field+".type", "is required (e.g. \"adamw\")")
	case "adamw":
		for _, k := range sortedKeys(o.Fields) {
			return "", errf(field+"."+k, "is not a field of the adamw optimizer_config (it has none)")
		}
	case "dimuon":
		for _, k := range sortedKeys(o.Fields) {
			if k != "version" {
				return "", errf(field+"."+k, "is not a field of the dimuon optimizer_config (it has version)")
			}
			var v json.Number
			d := json.NewDecoder(bytes.NewReader(o.Fields[k]))
			d.UseNumber()
			if err := d.Decode(&v); err != nil || v.String() != "1" {
				return "", errf(field+".version", "%s is not a Dimuon version this server implements (1)", bytes.TrimSpace(o.Fields[k]))
			}
		}
	}
	return o.Type, nil
}

// Dimuon is the optimizer_config that get_info and weights_info echo for Dimuon runs.
func Dimuon() *OptimizerConfig {
	return &OptimizerConfig{Type: "dimuon", Fields: map[string]json.RawMessage{"version": json.RawMessage("1")}}
}

// EchoOptimizer is the optimizer_config get_info and weights_info show for a family.
func EchoOptimizer(family string) *OptimizerConfig {
	if family == "dimuon" {
		return Dimuon()
	}
	return &OptimizerConfig{Type: family}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// AdamW is the optimizer_config that get_info and weights_info echo for Adam runs.
func AdamW() *OptimizerConfig { return &OptimizerConfig{Type: "adamw"} }

// StepParams are optim_step's parameters resolved: the family they are for and that
// family's parameters (Adam's with the SDK's defaults for absent fields, or Dimuon's).
type StepParams struct {
	Family string
	Adam   AdamParams
	Dimuon *DimuonParams
}

// OptimParams resolves optim_step's parameters: adam_params (Adam, every SDK),
// optimizer_params (a family by type, SDK >= 0.29.1) or optim_params (the SDK's own
// name, which it accepts on input). Another family than adamw and dimuon is returned by
// name, for the service to refuse.
func (o *OptimStepRequest) OptimParams() (StepParams, error) {
	given := 0
	for _, raw := range [][]byte{o.RawAdam, o.OptimizerParams, o.OptimParamsAlias} {
		if len(raw) > 0 && string(bytes.TrimSpace(raw)) != "null" {
			given++
		}
	}
	if given > 1 {
		return StepParams{}, errf("optimizer_params", "give one of adam_params, optimizer_params and optim_params")
	}
	if len(o.OptimizerParams) == 0 && len(o.OptimParamsAlias) > 0 {
		return o.typedParams("optim_params", o.OptimParamsAlias, true)
	}
	if len(o.OptimizerParams) > 0 && string(bytes.TrimSpace(o.OptimizerParams)) != "null" {
		return o.typedParams("optimizer_params", o.OptimizerParams, false)
	}
	return StepParams{Family: "adamw", Adam: o.AdamParams}, nil
}

var (
	adamFields   = jsonFields(reflect.TypeOf(AdamParams{}))
	dimuonFields = jsonFields(reflect.TypeOf(DimuonParams{}))
)

func (o *OptimStepRequest) typedParams(field string, raw []byte, untypedIsAdam bool) (StepParams, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return StepParams{}, errf(field, "must be an object")
	}
	var typ string
	if t, ok := m["type"]; ok {
		if err := json.Unmarshal(t, &typ); err != nil {
			return StepParams{}, errf(field+".type", "must be a string")
		}
	} else if untypedIsAdam {
		typ = "adamw"
	} else {
		return StepParams{}, errf(field+".type", "is required (e.g. \"adamw\")")
	}
	delete(m, "type")
	var fields map[string]reflect.Type
	switch typ {
	case "adamw":
		fields = adamFields
	case "dimuon":
		fields = dimuonFields
	default:
		return StepParams{Family: typ}, nil
	}
	for _, k := range sortedKeys(m) {
		if _, ok := fields[k]; !ok {
			return StepParams{}, errf(field+"."+k, "is not a %s parameter", typ)
		}
	}
	if typ == "dimuon" {
		if _, ok := m["learning_rate"]; !ok {
			return StepParams{}, errf(field+".learning_rate", "is required for dimuon")
		}
		p := DefaultDimuonParams()
		if err := DecodeJSON(raw, &p); err != nil {
			return StepParams{}, prefix(field, err)
		}
		return StepParams{Family: typ, Dimuon: &p}, nil
	}
	var p AdamParams
	if err := DecodeJSON(raw, &p); err != nil {
		return StepParams{}, prefix(field, err)
	}
	return StepParams{Family: typ, Adam: p}, nil
}

// DimuonParams are optimizer_params of type dimuon (SDK >= 0.30.4 sends type,
// learning_rate, grad_clip_norm and beta1); damping and rank_lr_correction_exponent
// are TuFT's, with DefaultDimuonParams' values when absent.
type DimuonParams struct {
	Type                     string  `json:"type"`
	LearningRate             float64 `json:"learning_rate"`
	GradClipNorm             float64 `json:"grad_clip_norm"`
	Beta1                    float64 `json:"beta1"`
	Damping                  float64 `json:"damping"`
	RankLRCorrectionExponent float64 `json:"rank_lr_correction_exponent"`
}

// DefaultDimuonParams are the defaults of the fields a request may omit (the
// learning rate has none): beta1 0.9, damping 0.1, rank exponent 0.5, no clipping. They
// are the engine's defaults too (api's TestDimuonDefaultsAreTheEngines checks it).
func DefaultDimuonParams() DimuonParams {
	return DimuonParams{Type: "dimuon", Beta1: 0.9, Damping: 0.1, RankLRCorrectionExponent: 0.5}
}

// FinishReason is the reason object of POST /sessions/{id}/finish.
type FinishReason struct {
	Type string `json:"type"`
}

// FinishSessionRequest is POST /sessions/{id}/finish (SDK >= 0.27.2: ServiceClient.close
// and the end of a `with ServiceClient()` block).
type FinishSessionRequest struct {
	Reason *FinishReason `json:"reason"`
	Detail *string       `json:"detail"`
}

// SessionStatus is a session's status in the SDK's SessionStatus shape: {"type":
// "active"}, {"type": "client_finished", "reason": {"type": ...}, "detail": ...}, or
// {"type": "cancelled", "detail": ...} for a session that expired without heartbeats.
type SessionStatus struct {
	Type   string        `json:"type"`
	Reason *FinishReason `json:"reason,omitempty"`
	Detail *string       `json:"detail,omitempty"`
}

// FinishSessionResponse answers finish with the session's (first) finish status.
type FinishSessionResponse struct {
	SessionID string        `json:"session_id"`
	Status    SessionStatus `json:"status"`
}

// SaveWeightsExternalRequest is POST /save_weights_external (SDK >= 0.28): a training
// operation with a seq_id. The server does not implement it yet and refuses it, settling
// its seq_id.
type SaveWeightsExternalRequest struct {
	ModelID                 string   `json:"model_id"`
	Path                    *string  `json:"path,omitempty"`
	SeqID                   *int64   `json:"seq_id,omitempty"`
	TTLSeconds              *int64   `json:"ttl_seconds,omitempty"`
	AgeEncryptionRecipients []string `json:"age_encryption_recipients,omitempty"`
	Type                    string   `json:"type,omitempty"`
}

// OpAddress reads the run and seq_id a JSON training request addresses, from a body that
// may otherwise be invalid (a NaN literal, a field of the wrong type, a truncated tail
// after the two), so that a refused request can still settle its seq_id whoever sent it.
func OpAddress(body []byte) (modelID string, seqID int64, ok bool) {
	modelID, ok = PeekJSONString(body, "model_id")
	if !ok || modelID == "" {
		return "", 0, false
	}
	if seqID, ok = PeekJSONInt(body, "seq_id"); !ok {
		return "", 0, false
	}
	return modelID, seqID, true
}

// ForwardBackwardAddress is OpAddress for a forward_backward body in either encoding.
func ForwardBackwardAddress(body []byte, protobuf bool) (modelID string, seqID int64, ok bool) {
	if !protobuf {
		return OpAddress(body)
	}
	var m tinkerpb.ForwardBackwardRequest
	if proto.Unmarshal(body, &m) != nil || m.ModelId == "" {
		return "", 0, false
	}
	return m.ModelId, int64(m.SeqId), true
}

// checkForwardBackwardProto merges loss_fn_config_v2 (which the SDK writes beside the
// numeric loss_fn_config, and alone for string values) into the numeric config and the
// string-valued one. Which keys a loss takes, and of which kind, the engine decides
// (engine.ValidateForward), naming the key it refuses.
func checkForwardBackwardProto(m *tinkerpb.ForwardBackwardRequest) (map[string]float64, map[string]string, error) {
	cfg := m.LossFnConfig
	var text map[string]string
	for _, k := range sortedKeys(m.LossFnConfigV2) {
		v := m.LossFnConfigV2[k]
		switch x := v.GetValue().(type) {
		case *tinkerpb.LossConfigValue_Number:
			if old, ok := cfg[k]; ok && old != x.Number {
				return nil, nil, errf(fmt.Sprintf("loss_fn_config_v2[%q]", k), "%v contradicts loss_fn_config[%q] = %v", x.Number, k, old)
			}
			if cfg == nil {
				cfg = map[string]float64{}
			}
			cfg[k] = x.Number
		case *tinkerpb.LossConfigValue_Text:
			if _, ok := cfg[k]; ok {
				return nil, nil, errf(fmt.Sprintf("loss_fn_config_v2[%q]", k), "the string %q contradicts the number loss_fn_config[%q] = %v", x.Text, k, cfg[k])
			}
			if len(x.Text) > maxLossConfigText {
				return nil, nil, errf(fmt.Sprintf("loss_fn_config_v2[%q]", k), "is %d bytes long, more than %d", len(x.Text), maxLossConfigText)
			}
			if text == nil {
				text = map[string]string{}
			}
			text[k] = x.Text
		default:
			return nil, nil, errf(fmt.Sprintf("loss_fn_config_v2[%q]", k), "has no value")
		}
	}
	// Provenance spans are validated per datum in DecodeForwardBackwardProto (checkProvenance).
	return cfg, text, nil
}

// maxLossConfigText bounds a string value of loss_fn_config_v2 (the values a loss may
// define are short names).
const maxLossConfigText = 256

// checkSampleFields refuses the sample request fields this server does not implement
// and validates prompt_logprobs_last_n against the prompt. (The sampling outputs'
// bounds are limits the service checks; their shapes engine.ValidateSample.)
func (m *SampleRequest) checkSampleFields(promptLen int) error {
	switch {
	case m.TopkSampleLogprobs < 0:
		return errf("topk_sample_logprobs", "%d must not be negative", m.TopkSampleLogprobs)
	case m.PromptAltTokensK < 0:
		return errf("prompt_alt_tokens_k", "%d must not be negative", m.PromptAltTokensK)
	case m.RecordStabilityInfo != nil && *m.RecordStabilityInfo:
		return errf("record_stability_info", "true records stability information for the stable_reinforce loss, which this server refuses "+
			"because Tinker does not publish its objective (nor what the record holds), so nothing could use the record: send false")
	}
	if n := m.PromptLogprobsLastN; n != nil {
		if m.PromptLogprobs == nil || !*m.PromptLogprobs {
			return errf("prompt_logprobs_last_n", "applies to prompt logprobs: set prompt_logprobs to true")
		}
		if *n < 1 || *n > promptLen-1 {
			return errf("prompt_logprobs_last_n", "%d must be between 1 and len(prompt)-1 = %d", *n, promptLen-1)
		}
	}
	return nil
}
