package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tuft-go/tuft/api/wire/tinkerpb"
)

// This file carries the sampling outputs of SDK 0.29-0.31 (topk_sample_logprobs,
// target_prompt_logprobs, prompt_alt_tokens_k): the request's target tensor, and the
// results in the SDK's protobuf SampleResponse (SampledSequence field 4, SampleResponse
// fields 5 and 6) and in the JSON form of a result.

// promptTargets decodes target_prompt_logprobs: an int64 [len(prompt)-1, K] tensor of
// token ids (-1: none), dense or CSR. Its shape against the prompt, the ids against the
// vocabulary and the CSR indices are checked by engine.ValidateSample, before queueing.
func promptTargets(td *TensorData) (*PromptTargets, error) {
	const f = "target_prompt_logprobs"
	switch td.DType {
	case "int64", "int32":
	default:
		return nil, errf(f+".dtype", "%q: token ids are an int64 tensor", td.DType)
	}
	if len(td.Shape) != 2 {
		return nil, errf(f+".shape", "%v: the tensor must be 2-D, [len(prompt)-1, K]", td.Shape)
	}
	n, err := shapeLen(td.Shape)
	if err != nil {
		return nil, prefix(f, err)
	}
	ids := make([]int32, len(td.Data))
	for i, num := range td.Data {
		v, err := num.Int64()
		if err != nil {
			x, ferr := num.Float64()
			if ferr != nil || x != math.Trunc(x) || math.Abs(x) > math.MaxInt32 {
				return nil, errf(fmt.Sprintf("%s.data[%d]", f, i), "%q is not a token id", num)
			}
			v = int64(x)
		}
		if v < -1 || v > math.MaxInt32 {
			return nil, errf(fmt.Sprintf("%s.data[%d]", f, i), "%d is neither -1 (none) nor a token id", v)
		}
		ids[i] = int32(v)
	}
	t := &PromptTargets{Rows: int(td.Shape[0]), Cols: int(td.Shape[1]), IDs: ids}
	if td.SparseCrowIndices == nil && td.SparseColIndices == nil {
		if len(ids) != n {
			return nil, errf(f+".data", "has %d values; shape %v needs %d", len(ids), td.Shape, n)
		}
		return t, nil
	}
	if td.SparseCrowIndices == nil || td.SparseColIndices == nil {
		return nil, errf(f, "a sparse CSR tensor needs both sparse_crow_indices and sparse_col_indices")
	}
	idx := func(name string, v []int64) ([]int, error) {
		out := make([]int, len(v))
		for i, x := range v {
			if x < 0 || x > math.MaxInt32 {
				return nil, errf(fmt.Sprintf("%s.%s[%d]", f, name, i), "%d is out of range", x)
			}
			out[i] = int(x)
		}
		return out, nil
	}
	if t.RowStarts, err = idx("sparse_crow_indices", td.SparseCrowIndices); err != nil {
		return nil, err
	}
	if t.ColIdx, err = idx("sparse_col_indices", td.SparseColIndices); err != nil {
		return nil, err
	}
	if len(t.RowStarts) == 0 { // PromptTargets tells CSR by a non-nil RowStarts
		return nil, errf(f+".sparse_crow_indices", "is empty; it needs rows+1 = %d entries", t.Rows+1)
	}
	return t, nil
}

// topkProto is rows of (token, logprob) as the SDK's TopkLogprobs: row-major length×k
// matrices, k the longest row, empty cells token 0 with logprob TopKSentinel.
func topkProto(rows [][]TokenLogprob) *tinkerpb.TopkLogprobs {
	k := 0
	for _, row := range rows {
		k = max(k, len(row))
	}
	n := len(rows)
	ids := make([]byte, 4*n*k)
	lps := make([]byte, 4*n*k)
	for i, row := range rows {
		for j := 0; j < k; j++ {
			tok, lp := int32(0), float32(TopKSentinel)
			if j < len(row) {
				tok, lp = row[j].Token, row[j].Logprob
			}
			binary.LittleEndian.PutUint32(ids[4*(i*k+j):], uint32(tok))
			binary.LittleEndian.PutUint32(lps[4*(i*k+j):], math.Float32bits(lp))
		}
	}
	return &tinkerpb.TopkLogprobs{TokenIds: ids, Logprobs: lps, K: uint32(k), Length: uint32(n)}
}

// topkFromProto reads a TopkLogprobs back (sentinel cells dropped).
func topkFromProto(field string, t *tinkerpb.TopkLogprobs) ([][]TokenLogprob, error) {
	k, n := int(t.K), int(t.Length)
	if len(t.TokenIds) != 4*n*k || len(t.Logprobs) != 4*n*k {
		return nil, errf(field, "size does not match k×length")
	}
	ids, lps := le32(t.TokenIds), leF32(t.Logprobs)
	out := make([][]TokenLogprob, 0, n)
	for i := 0; i < n; i++ {
		var row []TokenLogprob
		for j := 0; j < k; j++ {
			if lps[i*k+j] == TopKSentinel {
				continue
			}
			row = append(row, TokenLogprob{Token: ids[i*k+j], Logprob: lps[i*k+j]})
		}
		out = append(out, row)
	}
	return out, nil
}

func int64Bytes(v []int) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return b
}

// targetLogprobsProto is target_prompt_logprobs' answer: a float32 tensor of the
// request's shape and layout (the same CSR indices when it was sparse).
func targetLogprobsProto(t *PromptTargetLogprobs) *tinkerpb.Tensor {
	vals, _ := tensorBytes(Tensor{DType: Float32, F32: t.Logprobs})
	m := &tinkerpb.Tensor{Dtype: tinkerpb.DType_DTYPE_FLOAT32, Shape: []int64{int64(t.Rows), int64(t.Cols)}}
	if t.RowStarts != nil {
		m.Encoding = &tinkerpb.Tensor_SparseCsr{SparseCsr: &tinkerpb.SparseCsr{Values: vals,
			CrowIndices: int64Bytes(t.RowStarts), ColIndices: int64Bytes(t.ColIdx)}}
	} else {
		m.Encoding = &tinkerpb.Tensor_Dense{Dense: vals}
	}
	return m
}

// promptAltProto is prompt_alt_tokens' answer: int64 tokens and float32 logprobs, both
// dense [len(prompt)-1, k].
func promptAltProto(a *PromptAltTokens) *tinkerpb.PromptAltTokens {
	rows := 0
	if a.K > 0 {
		rows = len(a.Tokens) / a.K
	}
	shape := []int64{int64(rows), int64(a.K)}
	toks := make([]int64, len(a.Tokens))
	for i, t := range a.Tokens {
		toks[i] = int64(t)
	}
	tb, _ := tensorBytes(Tensor{DType: Int64, I64: toks})
	lb, _ := tensorBytes(Tensor{DType: Float32, F32: a.Logprobs})
	return &tinkerpb.PromptAltTokens{
		Tokens:   &tinkerpb.Tensor{Dtype: tinkerpb.DType_DTYPE_INT64, Shape: shape, Encoding: &tinkerpb.Tensor_Dense{Dense: tb}},
		Logprobs: &tinkerpb.Tensor{Dtype: tinkerpb.DType_DTYPE_FLOAT32, Shape: shape, Encoding: &tinkerpb.Tensor_Dense{Dense: lb}},
	}
}

// matrixShape reads a 2-D shape.
func matrixShape(field string, t *tinkerpb.Tensor) (rows, cols int, err error) {
	if t == nil || len(t.Shape) != 2 || t.Shape[0] < 0 || t.Shape[1] < 0 || t.Shape[0] > maxElements || t.Shape[1] > maxElements {
		return 0, 0, errf(field, "is not a 2-D tensor")
	}
	return int(t.Shape[0]), int(t.Shape[1]), nil
}

// targetLogprobsFromProto reads target_prompt_logprobs back (client side).
func targetLogprobsFromProto(t *tinkerpb.Tensor) (*PromptTargetLogprobs, error) {
	const f = "target_prompt_logprobs"
	rows, cols, err := matrixShape(f, t)
	if err != nil {
		return nil, err
	}
	if t.Dtype != tinkerpb.DType_DTYPE_FLOAT32 {
		return nil, errf(f, "has dtype %v, want float32", t.Dtype)
	}
	out := &PromptTargetLogprobs{Rows: rows, Cols: cols}
	switch e := t.Encoding.(type) {
	case *tinkerpb.Tensor_Dense:
		if len(e.Dense) != 4*rows*cols {
			return nil, errf(f, "has %d bytes for %d×%d float32 values", len(e.Dense), rows, cols)
		}
		out.Logprobs = leF32(e.Dense)
	case *tinkerpb.Tensor_SparseCsr:
		c := e.SparseCsr
		if len(c.Values)%4 != 0 || len(c.CrowIndices)%8 != 0 || len(c.ColIndices)%8 != 0 {
			return nil, errf(f, "sparse arrays are not whole float32/int64 arrays")
		}
		out.Logprobs = leF32(c.Values)
		for _, x := range leI64(c.CrowIndices) {
			out.RowStarts = append(out.RowStarts, int(x))
		}
		for _, x := range leI64(c.ColIndices) {
			out.ColIdx = append(out.ColIdx, int(x))
		}
		if len(out.RowStarts) != rows+1 || len(out.ColIdx) != len(out.Logprobs) {
			return nil, errf(f, "sparse indices do not match its %d rows and %d values", rows, len(out.Logprobs))
		}
	default:
		return nil, errf(f, "has no data")
	}
	return out, nil
}

// promptAltFromProto reads prompt_alt_tokens back (client side).
func promptAltFromProto(a *tinkerpb.PromptAltTokens) (*PromptAltTokens, error) {
	const f = "prompt_alt_tokens"
	rows, k, err := matrixShape(f+".tokens", a.GetTokens())
	if err != nil {
		return nil, err
	}
	tokens, err := tensorFromProto(a.Tokens)
	if err != nil {
		return nil, prefix(f+".tokens", err)
	}
	lps, err := tensorFromProto(a.GetLogprobs())
	if err != nil {
		return nil, prefix(f+".logprobs", err)
	}
	if tokens.DType != Int64 || lps.DType != Float32 || len(tokens.I64) != rows*k || len(lps.F32) != rows*k {
		return nil, errf(f, "tokens and logprobs must be int64 and float32 tensors of shape [%d, %d]", rows, k)
	}
	out := &PromptAltTokens{K: k, Tokens: make([]int32, len(tokens.I64)), Logprobs: lps.F32}
	for i, t := range tokens.I64 {
		out.Tokens[i] = int32(t)
	}
	return out, nil
}

// TensorDataOut is a result tensor in the JSON form of the SDK's TensorData.
type TensorDataOut struct {
	Data              any     `json:"data"`
	DType             string  `json:"dtype"`
	Shape             []int64 `json:"shape"`
	SparseCrowIndices []int   `json:"sparse_crow_indices,omitempty"`
	SparseColIndices  []int   `json:"sparse_col_indices,omitempty"`
}

// PromptAltTokensJSON is the JSON form of prompt_alt_tokens.
type PromptAltTokensJSON struct {
	Tokens   TensorDataOut `json:"tokens"`
	Logprobs TensorDataOut `json:"logprobs"`
}

// topkJSON is rows of (token, logprob) pairs in the JSON form of topk_prompt_logprobs
// (null for an empty row).
func topkJSON(rows [][]TokenLogprob) []*[][2]any {
	var out []*[][2]any
	for _, row := range rows {
		if len(row) == 0 {
			out = append(out, nil)
			continue
		}
		r := make([][2]any, len(row))
		for j, e := range row {
			r[j] = [2]any{e.Token, finite32(e.Logprob)}
		}
		out = append(out, &r)
	}
	return out
}

func targetLogprobsJSON(t *PromptTargetLogprobs) *TensorDataOut {
	return &TensorDataOut{Data: Floats(t.Logprobs), DType: "float32", Shape: []int64{int64(t.Rows), int64(t.Cols)},
		SparseCrowIndices: t.RowStarts, SparseColIndices: t.ColIdx}
}

func promptAltJSON(a *PromptAltTokens) *PromptAltTokensJSON {
	rows := 0
	if a.K > 0 {
		rows = len(a.Tokens) / a.K
	}
	shape := []int64{int64(rows), int64(a.K)}
	return &PromptAltTokensJSON{Tokens: TensorDataOut{Data: a.Tokens, DType: "int64", Shape: shape},
		Logprobs: TensorDataOut{Data: Floats(a.Logprobs), DType: "float32", Shape: shape}}
}
