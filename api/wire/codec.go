package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/tuft-go/tuft/api/wire/tinkerpb"
)

// Error is a decoding error naming the offending field.
type Error struct {
	Field string
	Msg   string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

func errf(field, format string, args ...any) error {
	return &Error{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// maxElements caps any one tensor, so a forged shape cannot make the server allocate
// more than a request could plausibly carry.
const maxElements = 1 << 24

// DecodeJSON decodes one JSON value into v with errors that say where the problem is,
// and rejects trailing data.
func DecodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return errf("", "malformed JSON at byte %d: %v", se.Offset, err)
		case errors.As(err, &te):
			f := te.Field
			if f == "" {
				f = "body"
			}
			return errf(f, "expected %s, got JSON %s", te.Type, te.Value)
		case errors.Is(err, io.EOF):
			return errf("", "empty body: a JSON object is required")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return errf("", "malformed JSON: unexpected end of input")
		}
		return errf("", "invalid JSON: %v", err)
	}
	if dec.More() {
		return errf("", "malformed JSON: trailing data after the object")
	}
	var rest json.RawMessage
	if err := dec.Decode(&rest); err != io.EOF {
		return errf("", "malformed JSON: trailing data after the object")
	}
	return nil
}

// Decompress undoes a Content-Encoding (identity, zstd or gzip), refusing output larger
// than maxBytes (decompression bombs). See Inflate for ratio limits.
func Decompress(encoding string, body []byte, maxBytes int64) ([]byte, error) {
	out, err := Inflate(encoding, body, InflateLimits{MaxBytes: maxBytes})
	if le, ok := err.(*LimitError); ok {
		return nil, errf("Content-Encoding", "decompressed body exceeds %d bytes (%s)", maxBytes, le.Limit)
	}
	if ee, ok := err.(*EncodingError); ok {
		return nil, errf("Content-Encoding", "%q is not supported (use zstd, gzip or none)", ee.Encoding)
	}
	return out, err
}

// ForwardBackwardCall is a decoded forward or forward_backward request.
type ForwardBackwardCall struct {
	ModelID     string
	SeqID       int64
	HasSeqID    bool
	ForwardOnly bool
	Req         ForwardBackwardInput
}

func le32(b []byte) []int32 {
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func leF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func leI64(b []byte) []int64 {
	out := make([]int64, len(b)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

// DecodeForwardBackwardProto decodes the SDK 0.25 protobuf body.
func DecodeForwardBackwardProto(body []byte) (*ForwardBackwardCall, error) {
	var m tinkerpb.ForwardBackwardRequest
	if err := proto.Unmarshal(body, &m); err != nil {
		return nil, errf("body", "malformed ForwardBackwardRequest protobuf: %v", err)
	}
	if m.ModelId == "" {
		return nil, errf("model_id", "is required")
	}
	cfg, text, err := checkForwardBackwardProto(&m)
	if err != nil {
		return nil, err
	}
	call := &ForwardBackwardCall{ModelID: m.ModelId, SeqID: int64(m.SeqId), HasSeqID: true, ForwardOnly: m.ForwardOnly,
		Req: ForwardBackwardInput{LossFn: m.LossFn, LossFnConfig: cfg, LossFnTextConfig: text}}
	if len(m.Data) == 0 {
		return nil, errf("data", "is empty: at least one datum is required")
	}
	for i, d := range m.Data {
		f := fmt.Sprintf("data[%d]", i)
		var toks []int32
		for j, c := range d.ModelInput {
			switch ch := c.Chunk.(type) {
			case *tinkerpb.Chunk_EncodedText:
				if len(ch.EncodedText.Tokens)%4 != 0 {
					return nil, errf(fmt.Sprintf("%s.model_input[%d].tokens", f, j), "%d bytes is not a whole number of int32 tokens", len(ch.EncodedText.Tokens))
				}
				toks = append(toks, le32(ch.EncodedText.Tokens)...)
			case nil:
				return nil, errf(fmt.Sprintf("%s.model_input[%d]", f, j), "empty chunk")
			default:
				return nil, errf(fmt.Sprintf("%s.model_input[%d]", f, j), "only encoded_text chunks are supported (images and audio are not)")
			}
		}
		inputs := map[string]Tensor{}
		for name, t := range d.LossFnInputs {
			et, err := tensorFromProto(t)
			if err != nil {
				return nil, prefix(fmt.Sprintf("%s.loss_fn_inputs[%q]", f, name), err)
			}
			inputs[name] = et
		}
		tgt, hasTgt := inputs["target_tokens"]
		if err := checkProvenance(f, d, len(toks), tgt, hasTgt); err != nil {
			return nil, err
		}
		call.Req.Data = append(call.Req.Data, Datum{Tokens: toks, LossInputs: inputs})
	}
	return call, nil
}

func prefix(field string, err error) error {
	var we *Error
	if errors.As(err, &we) {
		if we.Field == "" {
			return &Error{Field: field, Msg: we.Msg}
		}
		return &Error{Field: field + "." + we.Field, Msg: we.Msg}
	}
	return &Error{Field: field, Msg: err.Error()}
}

func shapeLen(shape []int64) (int, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, errf("shape", "negative dimension %d", d)
		}
		n *= d
		if n > maxElements {
			return 0, errf("shape", "%v has more than %d elements", shape, maxElements)
		}
	}
	return int(n), nil
}

func intsOf(shape []int64) []int {
	out := make([]int, len(shape))
	for i, d := range shape {
		out[i] = int(d)
	}
	return out
}

// tensorFromProto decodes a dense or CSR tensor; INT32 widens to int64, BFLOAT16 to float32.
func tensorFromProto(t *tinkerpb.Tensor) (Tensor, error) {
	var et Tensor
	var width int
	switch t.Dtype {
	case tinkerpb.DType_DTYPE_FLOAT32:
		et.DType, width = Float32, 4
	case tinkerpb.DType_DTYPE_BFLOAT16:
		et.DType, width = Float32, 2
	case tinkerpb.DType_DTYPE_INT64:
		et.DType, width = Int64, 8
	case tinkerpb.DType_DTYPE_INT32:
		et.DType, width = Int64, 4
	default:
		return et, errf("dtype", "%v is not supported (float32, bfloat16, int64 or int32)", t.Dtype)
	}
	decode := func(b []byte, field string) ([]float32, []int64, error) {
		if len(b)%width != 0 {
			return nil, nil, errf(field, "%d bytes is not a whole number of %d-byte elements", len(b), width)
		}
		switch t.Dtype {
		case tinkerpb.DType_DTYPE_FLOAT32:
			return leF32(b), nil, nil
		case tinkerpb.DType_DTYPE_BFLOAT16:
			f := make([]float32, len(b)/2)
			for i := range f {
				f[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
			}
			return f, nil, nil
		case tinkerpb.DType_DTYPE_INT64:
			return nil, leI64(b), nil
		default:
			v := le32(b)
			out := make([]int64, len(v))
			for i, x := range v {
				out[i] = int64(x)
			}
			return nil, out, nil
		}
	}
	switch enc := t.Encoding.(type) {
	case *tinkerpb.Tensor_Dense:
		f, i, err := decode(enc.Dense, "dense")
		if err != nil {
			return et, err
		}
		et.F32, et.I64 = f, i
		n := len(f) + len(i)
		if len(t.Shape) == 0 {
			et.Shape = []int{n}
		} else {
			want, err := shapeLen(t.Shape)
			if err != nil {
				return et, err
			}
			if want != n {
				return et, errf("shape", "%v describes %d elements but the data has %d", t.Shape, want, n)
			}
			et.Shape = intsOf(t.Shape)
		}
		return et, nil
	case *tinkerpb.Tensor_SparseCsr:
		if len(t.Shape) != 2 {
			return et, errf("shape", "a sparse CSR tensor needs a 2-D shape, got %v", t.Shape)
		}
		n, err := shapeLen(t.Shape)
		if err != nil {
			return et, err
		}
		vf, vi, err := decode(enc.SparseCsr.Values, "sparse_csr.values")
		if err != nil {
			return et, err
		}
		if len(enc.SparseCsr.CrowIndices)%8 != 0 || len(enc.SparseCsr.ColIndices)%8 != 0 {
			return et, errf("sparse_csr", "indices must be int64 arrays")
		}
		return csrToDense(et.DType, intsOf(t.Shape), n, vf, vi, leI64(enc.SparseCsr.CrowIndices), leI64(enc.SparseCsr.ColIndices))
	case nil:
		return et, errf("encoding", "tensor has neither dense nor sparse_csr data")
	}
	return et, errf("encoding", "unknown tensor encoding")
}

func csrToDense(dt DType, shape []int, n int, vf []float32, vi []int64, crow, col []int64) (Tensor, error) {
	rows, cols := shape[0], shape[1]
	nnz := len(vf) + len(vi)
	if len(crow) != rows+1 {
		return Tensor{}, errf("sparse_csr.crow_indices", "has %d entries, want rows+1 = %d", len(crow), rows+1)
	}
	if len(col) != nnz {
		return Tensor{}, errf("sparse_csr.col_indices", "has %d entries but there are %d values", len(col), nnz)
	}
	if crow[0] != 0 || crow[rows] != int64(nnz) {
		return Tensor{}, errf("sparse_csr.crow_indices", "must start at 0 and end at the number of values %d", nnz)
	}
	// Every index is checked before any is used: each row's range must lie within the
	// values, so no forged array can index past them.
	for r := 0; r < rows; r++ {
		if crow[r+1] < crow[r] || crow[r+1] > int64(nnz) {
			return Tensor{}, errf("sparse_csr.crow_indices", "entry %d (%d) must be in [%d, %d]: the row ranges must not decrease or pass the %d values",
				r+1, crow[r+1], crow[r], nnz, nnz)
		}
	}
	for k, c := range col {
		if c < 0 || c >= int64(cols) {
			return Tensor{}, errf("sparse_csr.col_indices", "entry %d: column %d out of range [0, %d)", k, c, cols)
		}
	}
	t := Tensor{DType: dt, Shape: shape}
	if dt == Float32 {
		t.F32 = make([]float32, n)
	} else {
		t.I64 = make([]int64, n)
	}
	for r := 0; r < rows; r++ {
		for k := crow[r]; k < crow[r+1]; k++ {
			c := col[k]
			if dt == Float32 {
				t.F32[r*cols+int(c)] = vf[k]
			} else {
				t.I64[r*cols+int(c)] = vi[k]
			}
		}
	}
	return t, nil
}

// TensorData is the JSON form of a tensor (the SDK's TensorData); decoded, a Tensor.
type TensorData struct {
	Data              []json.Number `json:"data"`
	DType             string        `json:"dtype"`
	Shape             []int64       `json:"shape,omitempty"`
	SparseCrowIndices []int64       `json:"sparse_crow_indices,omitempty"`
	SparseColIndices  []int64       `json:"sparse_col_indices,omitempty"`
}

// ModelInput is the JSON prompt / model input.
type ModelInput struct {
	Chunks []Chunk `json:"chunks"`
}

// Chunk is one JSON chunk of a ModelInput. Only encoded_text chunks are served; the
// fields of the other chunk types are declared so that the chunk is refused by its type.
type Chunk struct {
	Type   string  `json:"type"`
	Tokens []int64 `json:"tokens,omitempty"`
	// image, image_asset_pointer and dmel chunks (refused by type)
	Data           json.RawMessage `json:"data,omitempty"`
	Format         json.RawMessage `json:"format,omitempty"`
	ExpectedTokens json.RawMessage `json:"expected_tokens,omitempty"`
	Location       json.RawMessage `json:"location,omitempty"`
	Dmel           json.RawMessage `json:"dmel,omitempty"`
}

func (mi ModelInput) tokens(field string) ([]int32, error) {
	var out []int32
	for j, c := range mi.Chunks {
		f := fmt.Sprintf("%s.chunks[%d]", field, j)
		switch c.Type {
		case "encoded_text", "":
			for _, t := range c.Tokens {
				if t < math.MinInt32 || t > math.MaxInt32 {
					return nil, errf(f+".tokens", "token id %d is out of range", t)
				}
				out = append(out, int32(t))
			}
		default:
			return nil, errf(f, "chunk type %q is not supported: only encoded_text chunks are", c.Type)
		}
	}
	return out, nil
}

// DecodeForwardBackwardJSON decodes the JSON bodies of SDK 0.18–0.24's /forward_backward
// and /forward (see fbjson.go: memory about the size of the numbers it holds).
func DecodeForwardBackwardJSON(body []byte, forwardOnly bool) (*ForwardBackwardCall, error) {
	return decodeForwardBackwardJSON(body, forwardOnly)
}

// EncodeForwardBackwardProto encodes a request (client side).
func EncodeForwardBackwardProto(call ForwardBackwardCall) ([]byte, error) {
	m := &tinkerpb.ForwardBackwardRequest{ModelId: call.ModelID, SeqId: int32(call.SeqID), LossFn: call.Req.LossFn,
		LossFnConfig: call.Req.LossFnConfig, ForwardOnly: call.ForwardOnly}
	for k, v := range call.Req.LossFnTextConfig { // string values travel in v2 only, as the SDK writes them
		if m.LossFnConfigV2 == nil {
			m.LossFnConfigV2 = map[string]*tinkerpb.LossConfigValue{}
		}
		m.LossFnConfigV2[k] = &tinkerpb.LossConfigValue{Value: &tinkerpb.LossConfigValue_Text{Text: v}}
	}
	for _, d := range call.Req.Data {
		tb := make([]byte, 4*len(d.Tokens))
		for i, t := range d.Tokens {
			binary.LittleEndian.PutUint32(tb[4*i:], uint32(t))
		}
		pd := &tinkerpb.Datum{ModelInput: []*tinkerpb.Chunk{{Chunk: &tinkerpb.Chunk_EncodedText{EncodedText: &tinkerpb.EncodedTextChunk{Tokens: tb}}}},
			LossFnInputs: map[string]*tinkerpb.Tensor{}}
		for name, t := range d.LossInputs {
			b, dt := tensorBytes(t)
			shape := make([]int64, len(t.Shape))
			for i, s := range t.Shape {
				shape[i] = int64(s)
			}
			pd.LossFnInputs[name] = &tinkerpb.Tensor{Encoding: &tinkerpb.Tensor_Dense{Dense: b}, Dtype: dt, Shape: shape}
		}
		m.Data = append(m.Data, pd)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}
