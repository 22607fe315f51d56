package wire

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tuft-go/tuft/api/wire/tinkerpb"
)

func i64bytes(v []int64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return b
}

func f32bytes(n int) []byte { return make([]byte, 4*n) }

// badCSR are index arrays that must be refused (a 2×3 tensor with 3 values): each used to
// index past the values or the dense tensor, and panicked.
var badCSR = []struct {
	name      string
	crow, col []int64
	want      string
}{
	{"crow above nnz in the middle", []int64{0, 100, 3}, []int64{0, 1, 2}, "crow_indices"},
	{"crow negative in the middle", []int64{0, -5, 3}, []int64{0, 1, 2}, "crow_indices"},
	{"crow decreasing", []int64{0, 3, 2}, []int64{0, 1, 2}, "crow_indices"},
	{"crow huge", []int64{0, 1 << 62, 3}, []int64{0, 1, 2}, "crow_indices"},
	{"column negative", []int64{0, 1, 3}, []int64{-1, 1, 2}, "col_indices"},
	{"column past the row", []int64{0, 1, 3}, []int64{3, 1, 2}, "col_indices"},
}

func TestSparseCSRIndicesAreChecked(t *testing.T) {
	t.Parallel()
	for _, c := range badCSR {
		t.Run("json "+c.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"forward_backward_input":{"data":[{"model_input":{"chunks":[{"type":"encoded_text","tokens":[1,2]}]},`+
				`"loss_fn_inputs":{"weights":{"data":[1,2,3],"dtype":"float32","shape":[2,3],"sparse_crow_indices":%s,"sparse_col_indices":%s}}}],`+
				`"loss_fn":"cross_entropy"},"model_id":"m","seq_id":1}`, js(c.crow), js(c.col))
			_, err := DecodeForwardBackwardJSON([]byte(body), false)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %s", err, c.want)
			}
		})
		t.Run("proto "+c.name, func(t *testing.T) {
			m := &tinkerpb.ForwardBackwardRequest{ModelId: "m", LossFn: "cross_entropy", Data: []*tinkerpb.Datum{{
				ModelInput: []*tinkerpb.Chunk{{Chunk: &tinkerpb.Chunk_EncodedText{EncodedText: &tinkerpb.EncodedTextChunk{Tokens: make([]byte, 8)}}}},
				LossFnInputs: map[string]*tinkerpb.Tensor{"weights": {Dtype: tinkerpb.DType_DTYPE_FLOAT32, Shape: []int64{2, 3},
					Encoding: &tinkerpb.Tensor_SparseCsr{SparseCsr: &tinkerpb.SparseCsr{Values: f32bytes(3), CrowIndices: i64bytes(c.crow), ColIndices: i64bytes(c.col)}}}},
			}}}
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			_, err = DecodeForwardBackwardProto(b)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %s", err, c.want)
			}
		})
	}
}

func js(v []int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// FuzzCSRToDense feeds arbitrary index arrays to the CSR decoder: it may refuse them, but
// never panic, and what it accepts is a dense tensor of the declared shape.
func FuzzCSRToDense(f *testing.F) {
	f.Add(int64(2), int64(3), i64bytes([]int64{0, 1, 3}), i64bytes([]int64{2, 0, 1}), 3)
	f.Add(int64(2), int64(3), i64bytes([]int64{0, 100, 3}), i64bytes([]int64{0, 1, 2}), 3)
	f.Add(int64(1), int64(1), i64bytes([]int64{0, 1}), i64bytes([]int64{0}), 1)
	f.Fuzz(func(t *testing.T, rows, cols int64, crow, col []byte, nnz int) {
		if nnz < 0 || nnz > 1<<12 || len(crow)%8 != 0 || len(col)%8 != 0 {
			return
		}
		shape := []int64{rows, cols}
		n, err := shapeLen(shape)
		if err != nil || n > 1<<16 {
			return
		}
		vf := make([]float32, nnz)
		et, err := csrToDense(Float32, intsOf(shape), n, vf, nil, leI64(crow), leI64(col))
		if err == nil && len(et.F32) != n {
			t.Fatalf("accepted a tensor of %d elements for shape %v", len(et.F32), shape)
		}
	})
}

// FuzzDecodeSparseProto starts the protobuf decoder's fuzzing from bodies with CSR
// tensors, valid and forged.
func FuzzDecodeSparseProto(f *testing.F) {
	for _, c := range append(badCSR, struct {
		name      string
		crow, col []int64
		want      string
	}{"valid", []int64{0, 1, 3}, []int64{2, 0, 1}, ""}) {
		m := &tinkerpb.ForwardBackwardRequest{ModelId: "m", LossFn: "cross_entropy", Data: []*tinkerpb.Datum{{
			ModelInput: []*tinkerpb.Chunk{{Chunk: &tinkerpb.Chunk_EncodedText{EncodedText: &tinkerpb.EncodedTextChunk{Tokens: make([]byte, 8)}}}},
			LossFnInputs: map[string]*tinkerpb.Tensor{"weights": {Dtype: tinkerpb.DType_DTYPE_FLOAT32, Shape: []int64{2, 3},
				Encoding: &tinkerpb.Tensor_SparseCsr{SparseCsr: &tinkerpb.SparseCsr{Values: f32bytes(3), CrowIndices: i64bytes(c.crow), ColIndices: i64bytes(c.col)}}}},
		}}}
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		call, err := DecodeForwardBackwardProto(data)
		if err != nil {
			return
		}
		for _, d := range call.Req.Data {
			for name, x := range d.LossInputs {
				if x.Len() != len(x.F32)+len(x.I64) {
					t.Fatalf("%s: shape %v but %d values", name, x.Shape, len(x.F32)+len(x.I64))
				}
			}
		}
	})
}
