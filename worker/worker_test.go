package worker_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/backend/workerpb"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/worker"
)

const token = "s3cret-worker-token"

// tinyLocal hosts the tiny preset in process.
// testCallTimeout is workers.call_timeout_seconds of config.Default(): DialRemote keeps
// no default of its own.
var testCallTimeout = config.Default("").Workers.CallTimeoutSeconds.Duration()

func tinyLocal(t testing.TB) *backend.Local {
	m, err := engine.Load(testenv.TinyDir(t), "tiny")
	if err != nil {
		t.Fatal(err)
	}
	return backend.NewLocal([]*engine.Model{m}, []backend.ModelInfo{{Name: "tiny", Arch: m.Cfg.Arch, VocabSize: m.Cfg.VocabSize,
		MaxContextLength: m.Cfg.MaxPositions, Signature: "sig", Config: m.Cfg}})
}

// serve runs a worker over ex on a loopback port and returns its address.
func serve(t testing.TB, ex backend.Executor) (string, *worker.Service) {
	return testenv.ServeWorker(t, ex, worker.ServerOptions{Token: token})
}

func ceRequest(toks []int32) engine.ForwardRequest {
	n := len(toks) - 1
	tt := make([]int64, n)
	for i := range tt {
		tt[i] = int64(toks[i+1])
	}
	return engine.ForwardRequest{LossFn: "cross_entropy", Backward: true, Data: []engine.Datum{{Tokens: toks[:n],
		LossInputs: map[string]engine.Tensor{"target_tokens": {DType: engine.Int64, Shape: []int{n}, I64: tt}}}}}
}

// The remote executor gives exactly what the in-process one gives, step for step.
func TestRemoteEqualsLocal(t *testing.T) {
	addr, svc := serve(t, tinyLocal(t))
	ctx := context.Background()
	rem, err := backend.DialRemote(ctx, addr, backend.RemoteOptions{CallTimeout: testCallTimeout, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer rem.Close()
	if rem.Instance() != svc.Instance() || len(rem.Models()) != 1 || rem.Models()[0].Config.VocabSize == 0 {
		t.Fatalf("info: %s %+v", rem.Instance(), rem.Models())
	}
	local := tinyLocal(t)
	lc := engine.LoraConfig{Rank: 4, TrainAttn: true, TrainMLP: true, Seed: 3}
	req := ceRequest([]int32{5, 17, 99, 3, 42, 7, 8, 250})
	for _, ex := range []backend.Executor{rem, local} {
		if err := ex.CreateAdapter(ctx, "tiny", "run-1", lc); err != nil {
			t.Fatal(err)
		}
	}
	for step := 0; step < 3; step++ {
		var got [2]engine.ForwardResult
		for i, ex := range []backend.Executor{rem, local} {
			if got[i], err = ex.ForwardBackward(ctx, "tiny", "run-1", req); err != nil {
				t.Fatal(err)
			}
			if _, err := ex.OptimStep(ctx, "tiny", "run-1", engine.StepParams{Adam: engine.AdamParams{LearningRate: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}}); err != nil {
				t.Fatal(err)
			}
		}
		if got[0].Metrics["loss:sum"] != got[1].Metrics["loss:sum"] {
			t.Fatalf("step %d: remote loss %v, local %v", step, got[0].Metrics["loss:sum"], got[1].Metrics["loss:sum"])
		}
		r, l := got[0].Outputs[0]["logprobs"].F32, got[1].Outputs[0]["logprobs"].F32
		for i := range l {
			if r[i] != l[i] {
				t.Fatalf("step %d logprob %d: %v vs %v", step, i, r[i], l[i])
			}
		}
	}
	seed := int64(11)
	sreq := engine.SampleRequest{Prompt: []int32{1, 2, 3}, NumSamples: 2, PromptLogprobs: true, TopKPromptLogprobs: 2,
		Params: engine.SampleParams{MaxTokens: 5, Temperature: 1, TopP: 1, Seed: &seed}}
	rs, err := rem.Sample(ctx, "tiny", "run-1", sreq)
	if err != nil {
		t.Fatal(err)
	}
	ls, _ := local.Sample(ctx, "tiny", "run-1", sreq)
	if fmt.Sprint(rs.Sequences) != fmt.Sprint(ls.Sequences) || len(rs.TopKPrompt) != len(ls.TopKPrompt) || !math.IsNaN(float64(rs.PromptLogprobs[0])) {
		t.Fatalf("sample: remote %+v local %+v", rs, ls)
	}
	dir := t.TempDir()
	if err := rem.SaveState(ctx, "tiny", "run-1", dir, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/adapter_model.safetensors"); err != nil {
		t.Fatal(err)
	}
	if err := rem.LoadState(ctx, "tiny", "run-2", dir, true, engine.OptimizerConfig{}); err != nil {
		t.Fatal(err)
	}
}

// Dimuon runs on a worker as in process: the optimizer family travels with the adapter,
// its steps with their parameters, and its state through a checkpoint; a load that asks
// for the other family is refused with both named.
func TestRemoteDimuonEqualsLocal(t *testing.T) {
	addr, _ := serve(t, tinyLocal(t))
	ctx := context.Background()
	rem, err := backend.DialRemote(ctx, addr, backend.RemoteOptions{CallTimeout: testCallTimeout, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer rem.Close()
	local := tinyLocal(t)
	dimuon := engine.OptimizerConfig{Type: engine.OptimizerDimuon, Version: 1}
	lc := engine.LoraConfig{Rank: 4, TrainAttn: true, TrainMLP: true, Seed: 3, Optimizer: dimuon}
	req := ceRequest([]int32{5, 17, 99, 3, 42, 7, 8, 250})
	p := engine.NewDimuonParams(0.02)
	p.GradClipNorm = 1
	step := engine.StepParams{Dimuon: &p}
	for _, ex := range []backend.Executor{rem, local} {
		if err := ex.CreateAdapter(ctx, "tiny", "d", lc); err != nil {
			t.Fatal(err)
		}
		if _, err := ex.OptimStep(ctx, "tiny", "d", engine.StepParams{Adam: engine.AdamParams{LearningRate: 0.01, Beta1: 0.9, Beta2: 0.9}}); err == nil ||
			!strings.Contains(err.Error(), "dimuon") {
			t.Fatalf("adam params on a dimuon adapter: %v", err)
		}
	}
	var losses [2][]float64
	for s := 0; s < 3; s++ {
		for i, ex := range []backend.Executor{rem, local} {
			res, err := ex.ForwardBackward(ctx, "tiny", "d", req)
			if err != nil {
				t.Fatal(err)
			}
			m, err := ex.OptimStep(ctx, "tiny", "d", step)
			if err != nil {
				t.Fatal(err)
			}
			if m["learning_rate:max"] != 0.02 {
				t.Fatalf("metrics %v", m)
			}
			losses[i] = append(losses[i], res.Metrics["loss:sum"])
		}
	}
	if fmt.Sprint(losses[0]) != fmt.Sprint(losses[1]) || !(losses[0][2] < losses[0][0]) {
		t.Fatalf("remote %v, local %v", losses[0], losses[1])
	}
	dir := t.TempDir()
	if err := rem.SaveState(ctx, "tiny", "d", dir, true); err != nil {
		t.Fatal(err)
	}
	if err := rem.LoadState(ctx, "tiny", "d2", dir, true, engine.OptimizerConfig{}); err == nil ||
		!strings.Contains(err.Error(), "dimuon") || !strings.Contains(err.Error(), "adamw") {
		t.Fatalf("resuming dimuon state as adamw: %v", err)
	}
	if err := rem.LoadState(ctx, "tiny", "d2", dir, true, dimuon); err != nil {
		t.Fatal(err)
	}
	if err := local.LoadState(ctx, "tiny", "d2", dir, true, dimuon); err != nil {
		t.Fatal(err)
	}
	// The restored momentum continues exactly like the original on both sides.
	var next [2]float64
	for i, ex := range []backend.Executor{rem, local} {
		if _, err := ex.ForwardBackward(ctx, "tiny", "d2", req); err != nil {
			t.Fatal(err)
		}
		if _, err := ex.OptimStep(ctx, "tiny", "d2", step); err != nil {
			t.Fatal(err)
		}
		res, err := ex.ForwardBackward(ctx, "tiny", "d2", engine.ForwardRequest{LossFn: req.LossFn, Data: req.Data})
		if err != nil {
			t.Fatal(err)
		}
		next[i] = res.Metrics["loss:sum"]
	}
	if _, err := local.ForwardBackward(ctx, "tiny", "d", req); err != nil {
		t.Fatal(err)
	}
	if _, err := local.OptimStep(ctx, "tiny", "d", step); err != nil {
		t.Fatal(err)
	}
	orig, err := local.ForwardBackward(ctx, "tiny", "d", engine.ForwardRequest{LossFn: req.LossFn, Data: req.Data})
	if err != nil {
		t.Fatal(err)
	}
	if next[0] != next[1] || next[1] != orig.Metrics["loss:sum"] {
		t.Fatalf("after resume: remote %v, local %v, uninterrupted %v", next[0], next[1], orig.Metrics["loss:sum"])
	}
}

// Errors come back as the in-process executor's errors, so callers classify them alike.
func TestErrorsKeepTheirMeaning(t *testing.T) {
	addr, _ := serve(t, tinyLocal(t))
	ctx := context.Background()
	rem, err := backend.DialRemote(ctx, addr, backend.RemoteOptions{CallTimeout: testCallTimeout, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer rem.Close()
	_, err = rem.ForwardBackward(ctx, "tiny", "nope", ceRequest([]int32{1, 2, 3}))
	if !errors.Is(err, backend.ErrUnknownAdapter) {
		t.Fatalf("unknown adapter: %v", err)
	}
	if err := rem.CreateAdapter(ctx, "no-such-model", "x", engine.LoraConfig{Rank: 1}); !errors.Is(err, backend.ErrUnknownModel) {
		t.Fatalf("unknown model: %v", err)
	}
	rem.CreateAdapter(ctx, "tiny", "a", engine.LoraConfig{Rank: 2, TrainAttn: true})
	bad := ceRequest([]int32{1, 2, 3})
	bad.LossFn = "no_such_loss"
	_, err = rem.ForwardBackward(ctx, "tiny", "a", bad)
	var ie *engine.InputError
	if !errors.As(err, &ie) || !strings.Contains(ie.Msg, "no_such_loss") {
		t.Fatalf("bad input: %v", err)
	}
}

// Only callers with the shared token get in; the health service stays open for probes.
func TestWorkerAcceptsOnlyItsServer(t *testing.T) {
	addr, _ := serve(t, tinyLocal(t))
	ctx := context.Background()
	for _, tok := range []string{"", "wrong"} {
		_, err := backend.DialRemote(ctx, addr, backend.RemoteOptions{CallTimeout: testCallTimeout, Token: tok})
		if err == nil || !strings.Contains(err.Error(), "worker token") {
			t.Fatalf("token %q: %v", tok, err)
		}
	}
	if _, _, err := worker.NewServer(worker.NewService(tinyLocal(t)), worker.ServerOptions{}); err == nil {
		t.Fatal("a worker without a token or mutual TLS was allowed")
	}
}

// A call that outlives the deadline fails with a deadline error instead of hanging.
func TestSlowWorkerHitsTheDeadline(t *testing.T) {
	addr, _ := serve(t, slowExecutor{testenv.NewNoopExecutor()})
	rem, err := backend.DialRemote(context.Background(), addr, backend.RemoteOptions{Token: token, CallTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rem.Close()
	t0 := time.Now()
	_, err = rem.OptimStep(context.Background(), testenv.Model, "x", engine.StepParams{})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 5*time.Second {
		t.Fatalf("slow call: %v after %v", err, time.Since(t0))
	}
}

// An unreachable worker is an unavailable error, promptly.
func TestDeadWorkerIsUnavailable(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	t0 := time.Now()
	_, err := backend.DialRemote(context.Background(), addr, backend.RemoteOptions{CallTimeout: testCallTimeout, Token: token, ConnectTimeout: 2 * time.Second})
	if !errors.Is(err, backend.ErrWorkerUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dead worker: %v", err)
	}
	if time.Since(t0) > 5*time.Second {
		t.Fatalf("took %v", time.Since(t0))
	}
}

type slowExecutor struct{ *testenv.NoopExecutor }

func (s slowExecutor) OptimStep(ctx context.Context, _, _ string, _ engine.StepParams) (map[string]float64, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Minute):
		return nil, nil
	}
}

// BenchmarkRemoteHop prints the cost of the process boundary: forward_backward on the
// tiny preset in process versus through a worker on loopback, as a ratio in one run.
func BenchmarkRemoteHop(b *testing.B) {
	ctx := context.Background()
	local := tinyLocal(b)
	addr, _ := serve(b, tinyLocal(b))
	rem, err := backend.DialRemote(ctx, addr, backend.RemoteOptions{CallTimeout: testCallTimeout, Token: token})
	if err != nil {
		b.Fatal(err)
	}
	defer rem.Close()
	toks := make([]int32, 65)
	for i := range toks {
		toks[i] = int32(i*7%500 + 1)
	}
	req := ceRequest(toks)
	lc := engine.LoraConfig{Rank: 8, TrainAttn: true, TrainMLP: true}
	per := map[string]float64{}
	for _, c := range []struct {
		name string
		ex   backend.Executor
	}{{"in-process", local}, {"worker", rem}} {
		c.ex.CreateAdapter(ctx, "tiny", "bench", lc)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := c.ex.ForwardBackward(ctx, "tiny", "bench", req); err != nil {
					b.Fatal(err)
				}
			}
			per[c.name] = float64(b.Elapsed().Microseconds()) / float64(b.N)
		})
	}
	if per["in-process"] > 0 && per["worker"] > 0 {
		fmt.Fprintf(os.Stderr, "forward_backward (tiny, 64 tokens): in-process %.0f µs, through a local worker %.0f µs: ratio %.3f (hop %+.0f µs)\n",
			per["in-process"], per["worker"], per["worker"]/per["in-process"], per["worker"]-per["in-process"])
	}
}

// A streamed sample over gRPC reports the same tokens, in the same order, as the
// in-process executor, then the same result; the worker also hands over its tokenizer.
func TestSampleStreamAndTokenizerOverGRPC(t *testing.T) {
	m, err := engine.Load(testenv.TinyDir(t), "tiny")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(testenv.TinyDir(t) + "/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	text, err := backend.TextFromSource(raw, m.ChatTemplate, m.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	local := backend.NewLocal([]*engine.Model{m}, []backend.ModelInfo{{Name: "tiny", Arch: m.Cfg.Arch, VocabSize: m.Cfg.VocabSize,
		MaxContextLength: m.Cfg.MaxPositions, Signature: "sig", Config: m.Cfg, Text: text}})
	addr, _ := serve(t, local)
	rem, err := backend.DialRemote(context.Background(), addr, backend.RemoteOptions{CallTimeout: testCallTimeout, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer rem.Close()
	rt := rem.Models()[0].Text
	if rt == nil || rt.Template == nil {
		t.Fatal("the worker's model came without its tokenizer and chat template")
	}
	const s = "Hello, world! <|im_start|>user\nWhat is 2+2?<|im_end|>"
	want, _ := text.Codec.Encode(s)
	got, _ := rt.Codec.Encode(s)
	if fmt.Sprint(got) != fmt.Sprint(want) || rt.Codec.Decode(got) != s || rt.EOS != text.EOS {
		t.Fatalf("remote tokenizer: %v / %q, local %v", got, rt.Codec.Decode(got), want)
	}

	seed := int64(4)
	req := engine.SampleRequest{Prompt: want, NumSamples: 2, Params: engine.SampleParams{MaxTokens: 6, Temperature: 0.9, TopK: -1, TopP: 1, Seed: &seed}}
	collect := func(ex backend.Streamer) ([]engine.TokenEvent, engine.SampleResult) {
		var evs []engine.TokenEvent
		res, err := ex.SampleStream(context.Background(), "tiny", "", req, backend.Stream{TopLogprobs: 3,
			OnToken: func(ev engine.TokenEvent) { evs = append(evs, ev) }})
		if err != nil {
			t.Fatal(err)
		}
		return evs, res
	}
	le, lr := collect(local)
	re, rr := collect(rem)
	if fmt.Sprint(le) != fmt.Sprint(re) || fmt.Sprint(lr.Sequences) != fmt.Sprint(rr.Sequences) || len(re) == 0 || len(re[0].Top) != 3 {
		t.Fatalf("remote stream differs:\n%v\n%v", re, le)
	}
}

// The streaming RPC checks the worker token like the unary ones.
func TestSampleStreamNeedsTheToken(t *testing.T) {
	addr, _ := serve(t, tinyLocal(t))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := workerpb.NewExecutorClient(conn).SampleStream(context.Background(), &workerpb.SampleStreamRequest{
		Request: &workerpb.SampleRequest{Adapter: &workerpb.AdapterRef{Model: "tiny"}, Prompt: []int32{1, 2}, NumSamples: 1,
			Params: &workerpb.SampleParams{MaxTokens: 2, TopP: 1, TopK: -1}}})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("stream without the token: %v", err)
	}
}

// tenantRecorder is an executor that notes the tenant each call ran for.
type tenantRecorder struct {
	*backend.Local
	tenants chan string
}

func (r *tenantRecorder) Sample(ctx context.Context, model, lora string, req engine.SampleRequest) (engine.SampleResult, error) {
	r.tenants <- backend.TenantFrom(ctx)
	return r.Local.Sample(ctx, model, lora, req)
}

func (r *tenantRecorder) ForwardBackward(ctx context.Context, model, lora string, req engine.ForwardRequest) (engine.ForwardResult, error) {
	r.tenants <- backend.TenantFrom(ctx)
	return r.Local.ForwardBackward(ctx, model, lora, req)
}

// The worker's scheduler sees each call's tenant, and its KV-cache capacity and prefix
// cache hits come back to the API server.
func TestTenantAndSchedulerFiguresCrossTheWorker(t *testing.T) {
	rec := &tenantRecorder{Local: tinyLocal(t), tenants: make(chan string, 4)}
	addr, _ := serve(t, rec)
	r, err := backend.DialRemote(context.Background(), addr, backend.RemoteOptions{CallTimeout: testCallTimeout, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if kv := r.Models()[0].KVCacheTokens; kv <= 0 || kv != rec.Local.Models()[0].KVCacheTokens {
		t.Fatalf("KV cache tokens over the wire %d, worker %d", kv, rec.Local.Models()[0].KVCacheTokens)
	}
	ctx := backend.WithTenant(context.Background(), "tenant-a")
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(i + 3)
	}
	req := engine.SampleRequest{Prompt: prompt, NumSamples: 1, Params: engine.SampleParams{MaxTokens: 2, Temperature: 0, TopK: -1, TopP: 1}}
	if _, err := r.Sample(ctx, "tiny", "", req); err != nil {
		t.Fatal(err)
	}
	res, err := r.Sample(ctx, "tiny", "", req)
	if err != nil {
		t.Fatal(err)
	}
	if res.PromptCacheHitTokens != 32 {
		t.Fatalf("prompt cache hit tokens over the wire: %d, want 32", res.PromptCacheHitTokens)
	}
	if err := r.CreateAdapter(ctx, "tiny", "x", engine.LoraConfig{Rank: 2, TrainAttn: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ForwardBackward(backend.WithTenant(context.Background(), "tenant-b"), "tiny", "x", ceRequest([]int32{1, 2, 3, 4})); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tenant-a", "tenant-a", "tenant-b"} {
		if got := <-rec.tenants; got != want {
			t.Fatalf("the worker ran a call for tenant %q, want %q", got, want)
		}
	}
}

// The newer sampling outputs (top-k of sampled tokens, target prompt logprobs dense and
// CSR, alternative prompt tokens) cross to a worker and back unchanged, by Sample and by
// SampleStream: a remote result equals the in-process one.
func TestRemoteSampleOutputsEqualLocal(t *testing.T) {
	addr, _ := serve(t, tinyLocal(t))
	ctx := context.Background()
	rem, err := backend.DialRemote(ctx, addr, backend.RemoteOptions{CallTimeout: testCallTimeout, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer rem.Close()
	local := tinyLocal(t)
	seed := int64(5)
	prompt := []int32{4, 9, 33, 2, 71}
	dense := &engine.PromptTargets{Rows: 4, Cols: 2, IDs: []int32{9, -1, 33, 3, 2, -1, 71, 8}}
	sparse := &engine.PromptTargets{Rows: 4, Cols: 2, IDs: []int32{3, 71, 8}, RowStarts: []int{0, 0, 1, 1, 3}, ColIdx: []int{1, 0, 1}}
	for _, targets := range []*engine.PromptTargets{dense, sparse} {
		req := engine.SampleRequest{Prompt: prompt, NumSamples: 2, TopKSampleLogprobs: 3, PromptAltTokensK: 2, PromptTargets: targets,
			Params: engine.SampleParams{MaxTokens: 4, Temperature: 0.8, TopK: -1, TopP: 1, Seed: &seed}}
		ls, err := local.Sample(ctx, "tiny", "", req)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := rem.Sample(ctx, "tiny", "", req)
		if err != nil {
			t.Fatal(err)
		}
		st, err := rem.SampleStream(ctx, "tiny", "", req, backend.Stream{OnToken: func(engine.TokenEvent) {}})
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%+v %+v %+v", ls.Sequences, *ls.PromptTargetLogprobs, *ls.PromptAltTokens)
		for name, got := range map[string]engine.SampleResult{"Sample": rs, "SampleStream": st} {
			if got.PromptTargetLogprobs == nil || got.PromptAltTokens == nil {
				t.Fatalf("%s: outputs dropped: %+v", name, got)
			}
			if g := fmt.Sprintf("%+v %+v %+v", got.Sequences, *got.PromptTargetLogprobs, *got.PromptAltTokens); g != want {
				t.Fatalf("%s: remote\n%s\nlocal\n%s", name, g, want)
			}
		}
		if len(ls.Sequences[0].TopK) != len(ls.Sequences[0].Tokens) || (targets.Sparse() != (rs.PromptTargetLogprobs.RowStarts != nil)) {
			t.Fatalf("local result %+v", ls)
		}
	}
}
