package client_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/client"
	"github.com/tuft-go/tuft/internal/testenv"
)

func datum(start, n int) wire.Datum {
	toks := make([]int32, n)
	tgt := make([]int64, n)
	w := make([]float32, n)
	for i := range toks {
		toks[i], tgt[i], w[i] = int32(start+i), int64(start+i+1), 1
	}
	return wire.Datum{Tokens: toks, LossInputs: map[string]wire.Tensor{
		"target_tokens": {DType: wire.Int64, Shape: []int{n}, I64: tgt}, "weights": {DType: wire.Float32, Shape: []int{n}, F32: w}}}
}

func TestAgainstARealServer(t *testing.T) {
	t.Parallel()
	s := testenv.Start(t, testenv.Config(t, t.TempDir(), "memory"))
	ctx := context.Background()
	sc, err := client.NewServiceClient(ctx, s.URL(), testenv.KeyA, client.WithHeartbeat(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	models, err := sc.Capabilities(ctx)
	if err != nil || len(models) != 1 {
		t.Fatalf("capabilities %v %v", models, err)
	}
	tc, err := sc.CreateLoRATrainingClient(ctx, testenv.Model, client.DefaultLora(8))
	if err != nil {
		t.Fatal(err)
	}
	data := []wire.Datum{datum(20, 16), datum(60, 16)}
	adam := wire.AdamParams{LearningRate: 5e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
	// Pipelined: both steps are submitted before any result is read.
	var fbs []*client.Future[wire.ForwardBackwardOutput]
	var opts []*client.Future[map[string]float64]
	for i := 0; i < 4; i++ {
		fb, err := tc.ForwardBackward(ctx, data, "cross_entropy", nil)
		if err != nil {
			t.Fatal(err)
		}
		op, err := tc.OptimStep(ctx, adam)
		if err != nil {
			t.Fatal(err)
		}
		fbs, opts = append(fbs, fb), append(opts, op)
	}
	var losses []float64
	for i := range fbs {
		r, err := fbs[i].Result(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.LossFnOutputs) != 2 || len(r.LossFnOutputs[0]["logprobs"].F32) != 16 {
			t.Fatalf("outputs %+v", r.LossFnOutputs)
		}
		losses = append(losses, r.Metrics["loss:sum"])
		if _, err := opts[i].Result(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !(losses[3] < losses[0]) {
		t.Fatalf("loss did not fall: %v", losses)
	}
	sf, _ := tc.SaveState(ctx, "c1")
	statePath, err := sf.Result(ctx)
	if err != nil || !strings.HasSuffix(statePath, "/weights/c1") {
		t.Fatalf("save: %q %v", statePath, err)
	}
	pf, _ := tc.SaveWeightsForSampler(ctx, "s1")
	samplerPath, err := pf.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	scl, err := sc.CreateSamplingClient(ctx, samplerPath, "")
	if err != nil {
		t.Fatal(err)
	}
	seed := int64(3)
	p := client.DefaultSampling(6)
	p.Seed = &seed
	f, err := scl.Sample(ctx, []int32{20, 21, 22}, 3, p)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Result(ctx)
	if err != nil || len(res.Sequences) != 3 || len(res.Sequences[0].Logprobs) != len(res.Sequences[0].Tokens) {
		t.Fatalf("sample %+v %v", res, err)
	}
	lps, err := scl.ComputeLogprobs(ctx, []int32{20, 21, 22, 23})
	if err != nil || len(lps) != 4 {
		t.Fatalf("logprobs %v %v", lps, err)
	}
	// The 0.38 sampling outputs: greedy, so each sampled token is the top-1 of its
	// position; the target logprob of the next prompt token is its prompt logprob; k
	// alternative draws at every position after the first.
	greedy := client.SamplingParams{MaxTokens: 4, Temperature: 0, TopK: -1, TopP: 1}
	of, err := scl.SampleWithOutputs(ctx, []int32{20, 21, 22, 23}, 1, greedy, client.SampleOutputs{TopKSampleLogprobs: 3,
		TargetPromptLogprobs: [][]int32{{21, 5}, {22}, {23, -1}}, PromptAltTokensK: 2})
	if err != nil {
		t.Fatal(err)
	}
	out, err := of.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sq := out.Sequences[0]
	if len(sq.TopK) != len(sq.Tokens) {
		t.Fatalf("top-k rows %d for %d tokens", len(sq.TopK), len(sq.Tokens))
	}
	for i, row := range sq.TopK {
		if len(row) != 3 || row[0].Token != sq.Tokens[i] {
			t.Fatalf("token %d (%d): top-k %v", i, sq.Tokens[i], row)
		}
	}
	tg := out.PromptTargetLogprobs
	if tg == nil || tg.Rows != 3 || tg.Cols != 2 || len(tg.Logprobs) != 6 {
		t.Fatalf("target logprobs %+v", tg)
	}
	for i, want := range lps[1:] {
		if d := tg.Logprobs[i*2] - want; d > 1e-4 || d < -1e-4 {
			t.Fatalf("target logprob of prompt token %d: %v, prompt logprob %v", i+1, tg.Logprobs[i*2], want)
		}
	}
	if alt := out.PromptAltTokens; alt == nil || alt.K != 2 || len(alt.Tokens) != 3*2 {
		t.Fatalf("alternative prompt tokens %+v", alt)
	}
	if _, err := scl.SampleWithOutputs(ctx, []int32{20, 21}, 1, greedy, client.SampleOutputs{TargetPromptLogprobs: [][]int32{{1}, {2}}}); err == nil {
		t.Fatal("target rows not matching the prompt were sent")
	}
	// Resume exactly.
	resumed, err := sc.CreateTrainingClientFromState(ctx, statePath, true)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := tc.Forward(ctx, data, "cross_entropy", nil)
	b, _ := resumed.Forward(ctx, data, "cross_entropy", nil)
	ra, _ := a.Result(ctx)
	rb, _ := b.Result(ctx)
	if ra.Metrics["loss:sum"] != rb.Metrics["loss:sum"] {
		t.Fatalf("resumed run differs: %v vs %v", ra.Metrics, rb.Metrics)
	}
	// REST.
	rest := sc.REST()
	runs, err := rest.ListTrainingRuns(ctx, 20, 0)
	if err != nil || len(runs.TrainingRuns) != 2 {
		t.Fatalf("runs %+v %v", runs, err)
	}
	cks, err := rest.ListCheckpoints(ctx, tc.ModelID)
	if err != nil || len(cks) != 2 {
		t.Fatalf("checkpoints %v %v", cks, err)
	}
	if err := rest.Publish(ctx, samplerPath); err != nil {
		t.Fatal(err)
	}
	if err := rest.SetTTL(ctx, samplerPath, time.Hour); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	var calls int
	n, err := rest.Download(ctx, samplerPath, &buf, func(done, total int64) { calls++ })
	if err != nil || n == 0 || calls == 0 || !strings.Contains(buf.String(), "adapter_model.safetensors") {
		t.Fatalf("download %d bytes, %d progress calls, %v", n, calls, err)
	}
	if err := rest.DeleteCheckpoint(ctx, samplerPath); err != nil {
		t.Fatal(err)
	}
	// A user error is not retried and names the problem.
	if _, err := tc.ForwardBackward(ctx, data, "hinge", nil); err == nil || !strings.Contains(err.Error(), "hinge") {
		t.Fatalf("unknown loss: %v", err)
	}
}

func TestRetriesHonourRetryAfter(t *testing.T) {
	var n atomic.Int32
	var first, second time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			first = time.Now()
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"detail":"slow down"}`))
			return
		}
		second = time.Now()
		w.Write([]byte(`{"training_runs":[],"cursor":{"offset":0,"limit":20,"total_count":0}}`))
	}))
	defer srv.Close()
	rest, _ := client.NewRestClient(srv.URL, "tml-x", client.WithRetries(3, 10*time.Millisecond))
	if _, err := rest.ListTrainingRuns(context.Background(), 20, 0); err != nil {
		t.Fatal(err)
	}
	if d := second.Sub(first); d < 900*time.Millisecond {
		t.Fatalf("retried after %v, Retry-After said 1s", d)
	}
}

func TestTracingSendsTraceparent(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Traceparent"))
		w.Write([]byte(`{"training_runs":[],"cursor":{"offset":0,"limit":20,"total_count":0}}`))
	}))
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	off, _ := client.NewRestClient(srv.URL, "tml-x")
	off.ListTrainingRuns(context.Background(), 1, 0)
	if v, _ := got.Load().(string); v != "" {
		t.Fatal("tracing is on by default")
	}
	on, _ := client.NewRestClient(srv.URL, "tml-x", client.WithTracing(tp))
	on.ListTrainingRuns(context.Background(), 1, 0)
	if v, _ := got.Load().(string); !strings.HasPrefix(v, "00-") {
		t.Fatalf("traceparent %q", v)
	}
}

func TestKeyMustBeTinkerShaped(t *testing.T) {
	t.Parallel()
	if _, err := client.NewRestClient("http://x", "secret"); err == nil {
		t.Fatal("accepted a key without tml-")
	}
}
