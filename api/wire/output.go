package wire

// The operations' results: encoders and decoders of the forward_backward and asample
// outputs, protobuf and JSON. Request decoders live in codec.go and decode_*.go.

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/tuft-go/tuft/api/wire/tinkerpb"
)

func tensorBytes(t Tensor) ([]byte, tinkerpb.DType) {
	if t.DType == Int64 {
		b := make([]byte, 8*len(t.I64))
		for i, v := range t.I64 {
			binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
		}
		return b, tinkerpb.DType_DTYPE_INT64
	}
	b := make([]byte, 4*len(t.F32))
	for i, v := range t.F32 {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b, tinkerpb.DType_DTYPE_FLOAT32
}

// recordSig identifies the layout of one datum's outputs; a new ArrayRecord starts
// whenever it changes.
func recordSig(out map[string]Tensor) string {
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	s := ""
	for _, n := range names {
		t := out[n]
		s += fmt.Sprintf("%s:%d:%v;", n, t.DType, trailing(t))
	}
	return s
}

func trailing(t Tensor) []int64 {
	if len(t.Shape) <= 1 {
		return nil
	}
	out := make([]int64, len(t.Shape)-1)
	for i, d := range t.Shape[1:] {
		out[i] = int64(d)
	}
	return out
}

// EncodeForwardBackwardOutputProto encodes a result as the SDK 0.25 ForwardBackwardOutput.
func EncodeForwardBackwardOutputProto(res ForwardBackwardOutput, lossFn string) ([]byte, error) {
	m := &tinkerpb.ForwardBackwardOutput{LossFnOutputType: "ArrayRecord", Metrics: res.Metrics}
	if m.Metrics == nil {
		m.Metrics = map[string]float64{}
	}
	var cur *tinkerpb.ArrayRecord
	var curSig string
	offsets := map[string][]int64{}
	flush := func() {
		if cur == nil {
			return
		}
		for name, bt := range cur.Fields {
			ob := make([]byte, 8*len(offsets[name]))
			for i, o := range offsets[name] {
				binary.LittleEndian.PutUint64(ob[8*i:], uint64(o))
			}
			bt.Offsets = ob
		}
		m.LossFnOutputs = append(m.LossFnOutputs, cur)
	}
	for _, out := range res.LossFnOutputs {
		sig := recordSig(out)
		if cur == nil || sig != curSig {
			flush()
			cur = &tinkerpb.ArrayRecord{TypeTag: "ArrayRecord", Fields: map[string]*tinkerpb.BatchedTensor{}}
			curSig = sig
			offsets = map[string][]int64{}
			for name, t := range out {
				_, dt := tensorBytes(Tensor{DType: t.DType})
				cur.Fields[name] = &tinkerpb.BatchedTensor{Dtype: dt, TrailingShape: trailing(t)}
				offsets[name] = []int64{0}
			}
		}
		for name, t := range out {
			b, _ := tensorBytes(t)
			bt := cur.Fields[name]
			bt.Data = append(bt.Data, b...)
			offsets[name] = append(offsets[name], int64(len(bt.Data)))
		}
		cur.NumDatums++
	}
	flush()
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// fbOutputJSON is the JSON form of a ForwardBackwardOutput (SDK ≤ 0.24).
type fbOutputJSON struct {
	LossFnOutputType string                     `json:"loss_fn_output_type"`
	LossFnOutputs    []map[string]tensorOutJSON `json:"loss_fn_outputs"`
	Metrics          Metrics                    `json:"metrics"`
}

// tensorOutJSON is the JSON form of an output tensor.
type tensorOutJSON struct {
	Data  any    `json:"data"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
}

func jsonTensor(t Tensor) tensorOutJSON {
	if t.DType == Int64 {
		return tensorOutJSON{Data: t.I64, DType: "int64", Shape: t.Shape}
	}
	return tensorOutJSON{Data: floatsJSON(t.F32), DType: "float32", Shape: t.Shape}
}

// floatsJSON keeps NaN and infinities encodable (JSON has no literal for them).
func floatsJSON(f []float32) []any {
	out := make([]any, len(f))
	for i, v := range f {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			out[i] = nil
		} else {
			out[i] = v
		}
	}
	return out
}

// DecodeForwardBackwardOutputProto decodes a ForwardBackwardOutput (client side).
func DecodeForwardBackwardOutputProto(pb []byte) (ForwardBackwardOutput, error) {
	var m tinkerpb.ForwardBackwardOutput
	if err := proto.Unmarshal(pb, &m); err != nil {
		return ForwardBackwardOutput{}, errf("body", "malformed ForwardBackwardOutput: %v", err)
	}
	res := ForwardBackwardOutput{Metrics: m.Metrics}
	for ri, rec := range m.LossFnOutputs {
		outs := make([]map[string]Tensor, rec.NumDatums)
		for i := range outs {
			outs[i] = map[string]Tensor{}
		}
		for name, bt := range rec.Fields {
			if len(bt.Offsets) != 8*(int(rec.NumDatums)+1) {
				return res, errf(fmt.Sprintf("loss_fn_outputs[%d].fields[%q].offsets", ri, name), "want %d offsets", rec.NumDatums+1)
			}
			offs := leI64(bt.Offsets)
			tr := 1
			for _, d := range bt.TrailingShape {
				tr *= int(d)
			}
			for i := range outs {
				a, b := offs[i], offs[i+1]
				if a < 0 || b < a || b > int64(len(bt.Data)) {
					return res, errf(fmt.Sprintf("loss_fn_outputs[%d].fields[%q].offsets", ri, name), "out of range")
				}
				chunk := bt.Data[a:b]
				var t Tensor
				switch bt.Dtype {
				case tinkerpb.DType_DTYPE_FLOAT32:
					t = Tensor{DType: Float32, F32: leF32(chunk)}
				case tinkerpb.DType_DTYPE_INT64:
					t = Tensor{DType: Int64, I64: leI64(chunk)}
				default:
					pt, err := tensorFromProto(&tinkerpb.Tensor{Dtype: bt.Dtype, Encoding: &tinkerpb.Tensor_Dense{Dense: chunk}})
					if err != nil {
						return res, err
					}
					t = pt
				}
				n := len(t.F32) + len(t.I64)
				if tr == 0 {
					tr = 1
				}
				t.Shape = append([]int{n / tr}, intsOf(bt.TrailingShape)...)
				outs[i][name] = t
			}
		}
		res.LossFnOutputs = append(res.LossFnOutputs, outs...)
	}
	return res, nil
}

// ForwardBackwardOutputJSON is the JSON form of a result (SDK ≤ 0.24).
func ForwardBackwardOutputJSON(res ForwardBackwardOutput, lossFn string) ([]byte, error) {
	o := fbOutputJSON{LossFnOutputType: "ArrayRecord", Metrics: res.Metrics, LossFnOutputs: []map[string]tensorOutJSON{}}
	if o.Metrics == nil {
		o.Metrics = map[string]float64{}
	}
	for _, out := range res.LossFnOutputs {
		m := map[string]tensorOutJSON{}
		for n, t := range out {
			m[n] = jsonTensor(t)
		}
		o.LossFnOutputs = append(o.LossFnOutputs, m)
	}
	return json.Marshal(o)
}

// ForwardBackwardOutputProtoToJSON converts a stored protobuf result for a JSON client.
func ForwardBackwardOutputProtoToJSON(pb []byte) ([]byte, error) {
	res, err := DecodeForwardBackwardOutputProto(pb)
	if err != nil {
		return nil, err
	}
	var m tinkerpb.ForwardBackwardOutput
	_ = proto.Unmarshal(pb, &m)
	return ForwardBackwardOutputJSON(res, m.LossFnOutputType)
}

// TopKSentinel marks an empty top-k cell in the protobuf encoding.
const TopKSentinel = -99999.0

// EncodeSampleResponseProto encodes a sampling result as the SDK 0.25 SampleResponse.
func EncodeSampleResponseProto(res SampleResponse) ([]byte, error) {
	m := &tinkerpb.SampleResponse{PromptCacheHitTokens: int32(res.PromptCacheHitTokens)}
	for _, s := range res.Sequences {
		tb := make([]byte, 4*len(s.Tokens))
		for i, t := range s.Tokens {
			binary.LittleEndian.PutUint32(tb[4*i:], uint32(t))
		}
		lb, _ := tensorBytes(Tensor{DType: Float32, F32: s.Logprobs})
		sr := tinkerpb.StopReason_STOP_REASON_STOP
		if s.StopReason == StopReasonLength {
			sr = tinkerpb.StopReason_STOP_REASON_LENGTH
		}
		sq := &tinkerpb.SampledSequence{StopReason: sr, Tokens: tb, Logprobs: lb}
		if s.TopK != nil {
			sq.TopkSampledLogprobs = topkProto(s.TopK)
		}
		m.Sequences = append(m.Sequences, sq)
	}
	if res.PromptLogprobs != nil {
		b, _ := tensorBytes(Tensor{DType: Float32, F32: res.PromptLogprobs})
		m.PromptLogprobs = b
	}
	if res.TopKPrompt != nil {
		m.TopkPromptLogprobs = topkProto(res.TopKPrompt)
	}
	if t := res.PromptTargetLogprobs; t != nil {
		m.TargetPromptLogprobs = targetLogprobsProto(t)
	}
	if a := res.PromptAltTokens; a != nil {
		m.PromptAltTokens = promptAltProto(a)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// DecodeSampleResponseProto decodes a SampleResponse (client side).
func DecodeSampleResponseProto(pb []byte) (SampleResponse, error) {
	var m tinkerpb.SampleResponse
	if err := proto.Unmarshal(pb, &m); err != nil {
		return SampleResponse{}, errf("body", "malformed SampleResponse: %v", err)
	}
	res := SampleResponse{PromptCacheHitTokens: int(m.PromptCacheHitTokens)}
	for i, s := range m.Sequences {
		if len(s.Tokens)%4 != 0 || len(s.Logprobs)%4 != 0 {
			return res, errf(fmt.Sprintf("sequences[%d]", i), "arrays are not whole int32/float32 arrays")
		}
		sq := Sequence{Tokens: le32(s.Tokens), Logprobs: leF32(s.Logprobs), StopReason: StopReasonStop}
		if s.StopReason == tinkerpb.StopReason_STOP_REASON_LENGTH {
			sq.StopReason = StopReasonLength
		}
		if t := s.TopkSampledLogprobs; t != nil {
			top, err := topkFromProto(fmt.Sprintf("sequences[%d].topk_sampled_logprobs", i), t)
			if err != nil {
				return res, err
			}
			sq.TopK = top
		}
		res.Sequences = append(res.Sequences, sq)
	}
	if m.PromptLogprobs != nil {
		res.PromptLogprobs = leF32(m.PromptLogprobs)
	}
	if t := m.TopkPromptLogprobs; t != nil {
		top, err := topkFromProto("topk_prompt_logprobs", t)
		if err != nil {
			return res, err
		}
		res.TopKPrompt = top
	}
	if t := m.TargetPromptLogprobs; t != nil {
		tl, err := targetLogprobsFromProto(t)
		if err != nil {
			return res, err
		}
		res.PromptTargetLogprobs = tl
	}
	if a := m.PromptAltTokens; a != nil {
		alt, err := promptAltFromProto(a)
		if err != nil {
			return res, err
		}
		res.PromptAltTokens = alt
	}
	return res, nil
}

// SampleResponseJSON is the JSON form of a sampling result (SDK ≤ 0.24).
type SampleResponseJSON struct {
	Type                 string            `json:"type"`
	Sequences            []SampledSequence `json:"sequences"`
	PromptLogprobs       []*float32        `json:"prompt_logprobs,omitempty"`
	TopkPromptLogprobs   []*[][2]any       `json:"topk_prompt_logprobs,omitempty"`
	PromptCacheHitTokens int               `json:"prompt_cache_hit_tokens"`
	// The newer outputs, named as the SDK's SampleResponse fields (no SDK reads a
	// sample result as JSON since 0.25; the protobuf form is the one SDKs parse).
	TargetPromptLogprobs *TensorDataOut       `json:"target_prompt_logprobs,omitempty"`
	PromptAltTokens      *PromptAltTokensJSON `json:"prompt_alt_tokens,omitempty"`
}

// SampledSequence is one JSON sequence.
type SampledSequence struct {
	Tokens     []int32 `json:"tokens"`
	Logprobs   Floats  `json:"logprobs"`
	StopReason string  `json:"stop_reason"`
	// TopkLogprobs answers topk_sample_logprobs (SampledSequence.topk_logprobs).
	TopkLogprobs []*[][2]any `json:"topk_logprobs,omitempty"`
}

// SampleResponseProtoToJSON converts a stored protobuf result for a JSON client.
func SampleResponseProtoToJSON(pb []byte) ([]byte, error) {
	res, err := DecodeSampleResponseProto(pb)
	if err != nil {
		return nil, err
	}
	out := SampleResponseJSON{Type: "sample", Sequences: []SampledSequence{}, PromptCacheHitTokens: res.PromptCacheHitTokens}
	for _, s := range res.Sequences {
		out.Sequences = append(out.Sequences, SampledSequence{Tokens: s.Tokens, Logprobs: s.Logprobs, StopReason: string(s.StopReason),
			TopkLogprobs: topkJSON(s.TopK)})
	}
	for _, lp := range res.PromptLogprobs {
		out.PromptLogprobs = append(out.PromptLogprobs, finite32(lp))
	}
	out.TopkPromptLogprobs = topkJSON(res.TopKPrompt)
	if t := res.PromptTargetLogprobs; t != nil {
		out.TargetPromptLogprobs = targetLogprobsJSON(t)
	}
	if a := res.PromptAltTokens; a != nil {
		out.PromptAltTokens = promptAltJSON(a)
	}
	return json.Marshal(out)
}
