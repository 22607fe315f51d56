package api

import (
	"math"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/engine"
)

// fill sets every field reachable from v (structs, pointers, slices and maps of one
// element) to a non-zero value, so a conversion that drops a field leaves a zero behind.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint8:
		v.SetUint(1) // DType 1: float32 on both sides
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	}
}

// zeros lists the paths of the zero-valued leaves reachable from v.
func zeros(v reflect.Value, path string) []string {
	switch v.Kind() {
	case reflect.Struct:
		var out []string
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				out = append(out, zeros(v.Field(i), path+"."+v.Type().Field(i).Name)...)
			}
		}
		return out
	case reflect.Pointer:
		if v.IsNil() {
			return []string{path}
		}
		return zeros(v.Elem(), path)
	case reflect.Slice:
		if v.Len() == 0 {
			return []string{path}
		}
		return zeros(v.Index(0), path+"[0]")
	case reflect.Map:
		if v.Len() == 0 {
			return []string{path}
		}
		it := v.MapRange()
		it.Next()
		return zeros(it.Value(), path+"[k]")
	}
	if v.IsZero() {
		return []string{path}
	}
	return nil
}

// Every field of a wire type arrives in the engine's and back: a field added on one side
// (a new sampling option, a new output) fails here until convert.go carries it. The
// exceptions are the engine's own bookkeeping, which the wire does not carry.
func TestConversionsCarryEveryField(t *testing.T) {
	t.Parallel()
	check := func(name string, got any, except ...string) {
		t.Helper()
		for _, z := range zeros(reflect.ValueOf(got), name) {
			if !slices.Contains(except, z) {
				t.Errorf("%s is lost in the conversion (api/convert.go)", z)
			}
		}
	}

	var call wire.ForwardBackwardCall
	fill(reflect.ValueOf(&call).Elem())
	call.ForwardOnly = false
	check("ForwardRequest", forwardRequest(&call))

	var out engine.ForwardResult
	fill(reflect.ValueOf(&out).Elem())
	check("ForwardBackwardOutput", forwardOutput(out))

	var in wire.SampleInput
	fill(reflect.ValueOf(&in).Elem())
	check("SampleRequest", sampleRequest(in))

	var res engine.SampleResult
	fill(reflect.ValueOf(&res).Elem())
	check("SampleResponse", sampleResponse(res))

	var adam wire.AdamParams
	fill(reflect.ValueOf(&adam).Elem())
	check("AdamParams", adamParams(adam))

	var dimuon wire.DimuonParams
	fill(reflect.ValueOf(&dimuon).Elem())
	check("DimuonParams", dimuonParams(dimuon))

	var lora wire.LoraConfig
	fill(reflect.ValueOf(&lora).Elem())
	check("LoraConfig", loraConfig(lora, 0), "LoraConfig.Alpha", "LoraConfig.Optimizer.Type", "LoraConfig.Optimizer.Version")

	// And the other way: the engine's fields the wire has no place for are only these.
	wantOnlyEngine := map[string][]string{
		"ForwardResult": {"Tokens"}, "SampleResult": {"PromptTokens", "OutputTokens"}, "ForwardRequest": {"Backward"},
	}
	pairs := []struct {
		name     string
		eng, wir reflect.Type
	}{
		{"ForwardRequest", reflect.TypeFor[engine.ForwardRequest](), reflect.TypeFor[wire.ForwardBackwardInput]()},
		{"ForwardResult", reflect.TypeFor[engine.ForwardResult](), reflect.TypeFor[wire.ForwardBackwardOutput]()},
		{"SampleRequest", reflect.TypeFor[engine.SampleRequest](), reflect.TypeFor[wire.SampleInput]()},
		{"SampleParams", reflect.TypeFor[engine.SampleParams](), reflect.TypeFor[wire.SampleParams]()},
		{"SampleResult", reflect.TypeFor[engine.SampleResult](), reflect.TypeFor[wire.SampleResponse]()},
		{"Sequence", reflect.TypeFor[engine.Sequence](), reflect.TypeFor[wire.Sequence]()},
		{"Tensor", reflect.TypeFor[engine.Tensor](), reflect.TypeFor[wire.Tensor]()},
		{"Datum", reflect.TypeFor[engine.Datum](), reflect.TypeFor[wire.Datum]()},
		{"TokenLogprob", reflect.TypeFor[engine.TokenLogprob](), reflect.TypeFor[wire.TokenLogprob]()},
		{"PromptTargets", reflect.TypeFor[engine.PromptTargets](), reflect.TypeFor[wire.PromptTargets]()},
		{"PromptTargetLogprobs", reflect.TypeFor[engine.PromptTargetLogprobs](), reflect.TypeFor[wire.PromptTargetLogprobs]()},
		{"PromptAltTokens", reflect.TypeFor[engine.PromptAltTokens](), reflect.TypeFor[wire.PromptAltTokens]()},
	}
	renamed := map[string]string{"Outputs": "LossFnOutputs"}
	for _, p := range pairs {
		for i := 0; i < p.eng.NumField(); i++ {
			f := p.eng.Field(i).Name
			w := f
			if r, ok := renamed[f]; ok {
				w = r
			}
			if _, ok := p.wir.FieldByName(w); !ok && !slices.Contains(wantOnlyEngine[p.name], f) {
				t.Errorf("engine.%s.%s has no counterpart in %s: add it to the wire type and api/convert.go", p.name, f, p.wir)
			}
		}
	}
}

// The wire's Dimuon defaults (what a request may omit) are the engine's.
func TestDimuonDefaultsAreTheEngines(t *testing.T) {
	t.Parallel()
	w, e := wire.DefaultDimuonParams(), engine.NewDimuonParams(0)
	if got := dimuonParams(w); got != e {
		t.Fatalf("wire defaults %+v, engine defaults %+v", got, e)
	}
}

// Conversions share the arrays: a decoded body is held once, not twice.
func TestConversionsShareArrays(t *testing.T) {
	t.Parallel()
	toks, tgt, w := []int32{1, 2, 3}, []int64{2, 3, 4}, []float32{0, 1, 1}
	call := &wire.ForwardBackwardCall{ForwardOnly: true, Req: wire.ForwardBackwardInput{LossFn: "cross_entropy", Data: []wire.Datum{{Tokens: toks,
		LossInputs: map[string]wire.Tensor{"target_tokens": {DType: wire.Int64, Shape: []int{3}, I64: tgt},
			"weights": {DType: wire.Float32, Shape: []int{3}, F32: w}}}}}}
	req := forwardRequest(call)
	d := req.Data[0]
	if &d.Tokens[0] != &toks[0] || &d.LossInputs["target_tokens"].I64[0] != &tgt[0] || &d.LossInputs["weights"].F32[0] != &w[0] {
		t.Fatal("forwardRequest copied an array")
	}
	if req.Backward || d.LossInputs["target_tokens"].DType != engine.Int64 || d.LossInputs["weights"].DType != engine.Float32 {
		t.Fatalf("%+v", req)
	}
	lp := []float32{-1, float32(math.Inf(-1))}
	out := forwardOutput(engine.ForwardResult{Outputs: []map[string]engine.Tensor{{"logprobs": {DType: engine.Float32, Shape: []int{2}, F32: lp}}}})
	if &out.LossFnOutputs[0]["logprobs"].F32[0] != &lp[0] || out.LossFnOutputs[0]["logprobs"].DType != wire.Float32 {
		t.Fatal("forwardOutput copied an array or lost the dtype")
	}
	res := sampleResponse(engine.SampleResult{Sequences: []engine.Sequence{{Tokens: toks, Logprobs: w, StopReason: engine.StopReasonLength}},
		TopKPrompt: [][]engine.TokenLogprob{nil, {{Token: 4, Logprob: -1}}}})
	if &res.Sequences[0].Tokens[0] != &toks[0] || res.Sequences[0].StopReason != wire.StopReasonLength ||
		res.TopKPrompt[0] != nil || res.TopKPrompt[1][0] != (wire.TokenLogprob{Token: 4, Logprob: -1}) {
		t.Fatalf("%+v", res)
	}
}

// benchForwardBody is a large forward_backward body (32 datums of 4096 tokens with int64
// targets and float weights), as JSON (SDK 0.18-0.24) or protobuf (SDK >= 0.25).
func benchForwardBody(b *testing.B, protobuf bool) []byte {
	const datums, tokens = 32, 4096
	if protobuf {
		call := wire.ForwardBackwardCall{ModelID: "s:train:0", SeqID: 1, Req: wire.ForwardBackwardInput{LossFn: "cross_entropy"}}
		for d := 0; d < datums; d++ {
			toks, tgt, w := make([]int32, tokens), make([]int64, tokens), make([]float32, tokens)
			for i := range toks {
				toks[i], tgt[i], w[i] = int32((i*7919+d)%32000), int64((i*7919+d+1)%32000), float32(i%3)*0.25
			}
			call.Req.Data = append(call.Req.Data, wire.Datum{Tokens: toks, LossInputs: map[string]wire.Tensor{
				"target_tokens": {DType: wire.Int64, Shape: []int{tokens}, I64: tgt}, "weights": {DType: wire.Float32, Shape: []int{tokens}, F32: w}}})
		}
		body, err := wire.EncodeForwardBackwardProto(call)
		if err != nil {
			b.Fatal(err)
		}
		return body
	}
	var sb strings.Builder
	list := func(f func(i int) string) {
		for i := 0; i < tokens; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(f(i))
		}
	}
	sb.WriteString(`{"model_id":"s:train:0","seq_id":1,"forward_backward_input":{"loss_fn":"cross_entropy","data":[`)
	for d := 0; d < datums; d++ {
		if d > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"model_input":{"chunks":[{"type":"encoded_text","tokens":[`)
		list(func(i int) string { return strconv.Itoa((i*7919 + d) % 32000) })
		sb.WriteString(`]}]},"loss_fn_inputs":{"target_tokens":{"dtype":"int64","shape":[` + strconv.Itoa(tokens) + `],"data":[`)
		list(func(i int) string { return strconv.Itoa((i*7919 + d + 1) % 32000) })
		sb.WriteString(`]},"weights":{"dtype":"float32","shape":[` + strconv.Itoa(tokens) + `],"data":[`)
		list(func(i int) string { return strconv.FormatFloat(float64(i%3)*0.25, 'g', -1, 32) })
		sb.WriteString(`]}}}`)
	}
	sb.WriteString(`]}}`)
	return []byte(sb.String())
}

// The route's whole decode, wire decoding and conversion to the engine's request, with
// its allocation as a ratio to the body's size (alloc/body); compare with api/wire's
// decode-only benchmarks of the same bodies.
func benchDecodeAndConvert(b *testing.B, protobuf bool) {
	body := benchForwardBody(b, protobuf)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	n := 0
	for b.Loop() {
		var call *wire.ForwardBackwardCall
		var err error
		if protobuf {
			call, err = wire.DecodeForwardBackwardProto(body)
		} else {
			call, err = wire.DecodeForwardBackwardJSON(body, false)
		}
		if err != nil {
			b.Fatal(err)
		}
		if req := forwardRequest(call); len(req.Data) != 32 {
			b.Fatal(len(req.Data))
		}
		n++
	}
	runtime.ReadMemStats(&m1)
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(n)/float64(len(body)), "alloc/body")
}

func BenchmarkDecodeAndConvertForwardBackwardJSON(b *testing.B)  { benchDecodeAndConvert(b, false) }
func BenchmarkDecodeAndConvertForwardBackwardProto(b *testing.B) { benchDecodeAndConvert(b, true) }

// target_prompt_logprobs that decode (api/wire checks their form) are refused by the
// engine's checks at the edge once converted: rows against the prompt, ids against the
// vocabulary, forged CSR ranges.
func TestSampleOutputsRefusedByTheEngine(t *testing.T) {
	t.Parallel()
	c := engine.Config{VocabSize: 512, MaxPositions: 1024}
	for _, tc := range []struct{ targets, want string }{
		{`{"data":[1,2,3],"dtype":"int64","shape":[3,1]}`, "len(prompt)-1 = 2"},
		{`{"data":[1,512],"dtype":"int64","shape":[2,1]}`, "vocabulary"},
		{`{"data":[1],"dtype":"int64","shape":[2,1],"sparse_crow_indices":[0,5,1],"sparse_col_indices":[0]}`, "sparse_crow_indices"},
		{`{"data":[1],"dtype":"int64","shape":[2,1],"sparse_crow_indices":[0,1,1],"sparse_col_indices":[3]}`, "sparse_col_indices"},
	} {
		body := `{"prompt":{"chunks":[{"type":"encoded_text","tokens":[1,2,3]}]},"sampling_params":{"max_tokens":1},"target_prompt_logprobs":` + tc.targets + `}`
		call, err := wire.DecodeSampleRequest([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", tc.targets, err)
		}
		if err := engine.ValidateSample(c, sampleRequest(call.Req)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %q", tc.targets, err, tc.want)
		}
	}
}

// What the edge runs on an asample body: decode, convert, the engine's checks. Whatever
// the decoder lets through, the checks answer and never panic (forged CSR indices
// included).
func FuzzSampleRequestAtTheEdge(f *testing.F) {
	f.Add([]byte(`{"num_samples":2,"prompt":{"chunks":[{"type":"encoded_text","tokens":[1]}]},"sampling_params":{"max_tokens":3,"stop":["x"]}}`))
	f.Add([]byte(`{"prompt":{"chunks":[{"type":"encoded_text","tokens":[1,2,3]}]},"sampling_params":{"max_tokens":1},"topk_sample_logprobs":2,"prompt_alt_tokens_k":3,` +
		`"target_prompt_logprobs":{"data":[5,-1,7],"dtype":"int64","shape":[2,2],"sparse_crow_indices":[0,2,3],"sparse_col_indices":[0,1,1]}}`))
	f.Add([]byte(`{"prompt":{"chunks":[{"type":"encoded_text","tokens":[1,2,3]}]},"sampling_params":{"max_tokens":1},"target_prompt_logprobs":{"data":[5,-1],"dtype":"int64","shape":[2,1]}}`))
	c := engine.Config{VocabSize: 512, MaxPositions: 1024}
	f.Fuzz(func(t *testing.T, data []byte) {
		if call, err := wire.DecodeSampleRequest(data); err == nil {
			_ = engine.ValidateSample(c, sampleRequest(call.Req))
		}
	})
}
