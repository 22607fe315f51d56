package wire

import (
	"encoding/binary"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tuft-go/tuft/api/wire/tinkerpb"
)

// Large forward_backward bodies (32 datums of 4096 tokens, with int64 targets and float
// weights), built without the package's own encoders so the benchmarks measure only the
// decoders. Each reports its allocation as a ratio to the body's size (B/body-B): the
// reference is the body itself, which a decoder must at least hold once.
const benchDatums, benchTokens = 32, 4096

// benchFwdJSON is the JSON form of the large body (SDK 0.18-0.24).
func benchFwdJSON() []byte {
	var sb strings.Builder
	sb.WriteString(`{"model_id":"s:train:0","seq_id":1,"forward_backward_input":{"loss_fn":"cross_entropy","data":[`)
	for d := 0; d < benchDatums; d++ {
		if d > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"model_input":{"chunks":[{"type":"encoded_text","tokens":[`)
		for i := 0; i < benchTokens; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(strconv.Itoa((i*7919 + d) % 32000))
		}
		sb.WriteString(`]}]},"loss_fn_inputs":{"target_tokens":{"dtype":"int64","shape":[` + strconv.Itoa(benchTokens) + `],"data":[`)
		for i := 0; i < benchTokens; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(strconv.Itoa((i*7919 + d + 1) % 32000))
		}
		sb.WriteString(`]},"weights":{"dtype":"float32","shape":[` + strconv.Itoa(benchTokens) + `],"data":[`)
		for i := 0; i < benchTokens; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(strconv.FormatFloat(float64(i%3)*0.25, 'g', -1, 32))
		}
		sb.WriteString(`]}}}`)
	}
	sb.WriteString(`]}}`)
	return []byte(sb.String())
}

// benchFwdProto is the protobuf form of the large body (SDK >= 0.25).
func benchFwdProto() []byte {
	m := &tinkerpb.ForwardBackwardRequest{ModelId: "s:train:0", SeqId: 1, LossFn: "cross_entropy"}
	for d := 0; d < benchDatums; d++ {
		toks := make([]byte, 4*benchTokens)
		tgt := make([]byte, 8*benchTokens)
		w := make([]byte, 4*benchTokens)
		for i := 0; i < benchTokens; i++ {
			binary.LittleEndian.PutUint32(toks[4*i:], uint32((i*7919+d)%32000))
			binary.LittleEndian.PutUint64(tgt[8*i:], uint64((i*7919+d+1)%32000))
			binary.LittleEndian.PutUint32(w[4*i:], math.Float32bits(float32(i%3)*0.25))
		}
		m.Data = append(m.Data, &tinkerpb.Datum{
			ModelInput: []*tinkerpb.Chunk{{Chunk: &tinkerpb.Chunk_EncodedText{EncodedText: &tinkerpb.EncodedTextChunk{Tokens: toks}}}},
			LossFnInputs: map[string]*tinkerpb.Tensor{
				"target_tokens": {Dtype: tinkerpb.DType_DTYPE_INT64, Shape: []int64{benchTokens}, Encoding: &tinkerpb.Tensor_Dense{Dense: tgt}},
				"weights":       {Dtype: tinkerpb.DType_DTYPE_FLOAT32, Shape: []int64{benchTokens}, Encoding: &tinkerpb.Tensor_Dense{Dense: w}},
			}})
	}
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func benchDecode(b *testing.B, body []byte, decode func([]byte) error) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	n := 0
	for b.Loop() {
		if err := decode(body); err != nil {
			b.Fatal(err)
		}
		n++
	}
	runtime.ReadMemStats(&m1)
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(n)/float64(len(body)), "alloc/body")
}

func BenchmarkDecodeForwardBackwardJSON(b *testing.B) {
	body := benchFwdJSON()
	benchDecode(b, body, func(p []byte) error { _, err := DecodeForwardBackwardJSON(p, false); return err })
}

func BenchmarkDecodeForwardBackwardProto(b *testing.B) {
	body := benchFwdProto()
	benchDecode(b, body, func(p []byte) error { _, err := DecodeForwardBackwardProto(p); return err })
}
