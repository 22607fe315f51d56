package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/cuda"
	"github.com/tuft-go/tuft/internal/cli"
	"github.com/tuft-go/tuft/telemetry"
)

// `tuft-bench sampling` measures the scheduler: N concurrent one-sample requests over M
// adapters and T tenants, decoded together in shared steps, beside (a) one request of N
// samples on the same engine (one prompt, one prefill, N forked sequences: the batching
// upper bound) and (b) the PyTorch reference doing the same batched multi-LoRA decode
// (tools/torchref/bench_sampling.py).

type samplingOptions struct {
	modelFlags
	requests, adapters, tenants int
	promptTokens, sampleTokens  int
	rank                        int
	seed                        int64
	sched                       backend.SchedConfig
	kvMiB                       int
	torchFlags
	jsonOut bool
	rounds  int
	// device and cudaLibDirs are as tuft-bench engine's (--device, --cuda-lib-dirs).
	device, cudaLibDirs string
	cudaGraphs          bool // engine.cuda_graphs
	cudaGEMV            bool // engine.cuda_gemv
}

// samplingPhase is one measured run.
type samplingPhase struct {
	Requests      int                `json:"requests"`
	Samples       int                `json:"samples_per_request"`
	OutputTokens  int                `json:"output_tokens"`
	Seconds       float64            `json:"seconds"`
	TokensPerS    float64            `json:"tokens_per_s"`
	TTFTP50Ms     float64            `json:"ttft_p50_ms,omitempty"`
	TTFTP99Ms     float64            `json:"ttft_p99_ms,omitempty"`
	TenantTPS     map[string]float64 `json:"tenant_tokens_per_s,omitempty"`
	TenantRatio   float64            `json:"tenant_max_min_ratio,omitempty"`
	MaxBatch      int64              `json:"max_batch_sequences,omitempty"`
	Steps         int64              `json:"decode_steps,omitempty"`
	Preemptions   int64              `json:"preemptions,omitempty"`
	PrefixHitToks int64              `json:"prefix_cache_hit_tokens,omitempty"`
	// On a GPU: kernel launches and cuBLAS products queued, and the decode steps' CUDA
	// graphs (captures, launches, steps that asked for one and ran eagerly) in the phase.
	DeviceLaunches uint64 `json:"device_launches,omitempty"`
	GraphCaptures  int64  `json:"graph_captures,omitempty"`
	GraphLaunches  int64  `json:"graph_launches,omitempty"`
	GraphFallbacks int64  `json:"graph_fallbacks,omitempty"`
}

// gpuCounts is what a GPU device has queued so far (zero elsewhere).
type gpuCounts struct {
	launches                    uint64
	captures, graphs, fallbacks int64
}

func countsOf(dev engine.Device) gpuCounts {
	var c gpuCounts
	if l, ok := dev.(interface{ Launches() uint64 }); ok {
		c.launches = l.Launches()
	}
	if s, ok := dev.(interface{ Stats() cuda.Stats }); ok {
		st := s.Stats()
		c.captures, c.graphs, c.fallbacks = st.GraphCaptures, st.GraphLaunches, st.GraphFallbacks
	}
	return c
}

// since sets p's device figures to what was queued after c0.
func (p *samplingPhase) since(dev engine.Device, c0 gpuCounts) {
	c := countsOf(dev)
	p.DeviceLaunches, p.GraphCaptures = c.launches-c0.launches, c.captures-c0.captures
	p.GraphLaunches, p.GraphFallbacks = c.graphs-c0.graphs, c.fallbacks-c0.fallbacks
}

type samplingReport struct {
	Preset        string              `json:"preset,omitempty"`
	ModelDir      string              `json:"model_dir"`
	Arch          string              `json:"arch"`
	Layers        int                 `json:"layers"`
	Hidden        int                 `json:"hidden"`
	Vocab         int                 `json:"vocab"`
	Device        string              `json:"device,omitempty"`
	Adapters      int                 `json:"adapters"`
	Tenants       int                 `json:"tenants"`
	Rank          int                 `json:"rank"`
	PromptTokens  int                 `json:"prompt_tokens"`
	SampleTokens  int                 `json:"sample_tokens"`
	CPUs          int                 `json:"cpus"`
	GOMAXPROCS    int                 `json:"gomaxprocs"`
	Sched         backend.SchedConfig `json:"scheduler"`
	GoGEMMGFlops  float64             `json:"go_gemm_gflops"`
	Single        samplingPhase       `json:"single_request"`
	Concurrent    samplingPhase       `json:"concurrent"`
	Rounds        int                 `json:"rounds"`
	RoundRatios   []float64           `json:"round_ratios"`
	Ratio         float64             `json:"concurrent_over_single"` // median of the rounds' ratios
	Torch         *torchSampling      `json:"torch,omitempty"`
	TorchSkipped  string              `json:"torch_skipped,omitempty"`
	TorchRatio    float64             `json:"concurrent_over_torch,omitempty"`
	TorchRefusal  string              `json:"torch_ratio_refused,omitempty"`
	TargetRatio   float64             `json:"target_concurrent_over_single"`
	TargetTenants float64             `json:"target_tenant_max_min_ratio"`
}

// torchSampling is what tools/torchref/bench_sampling.py prints.
type torchSampling struct {
	TorchVersion string      `json:"torch_version"`
	Threads      int         `json:"threads"`
	BLAS         torchBLAS   `json:"blas"`
	Single       benchSample `json:"single_request"`
	Batched      benchSample `json:"batched_multi_lora"`
}

// torchBLAS says which BLAS the reference's torch runs its matrix products on and how
// fast: a reference on Debian's unoptimised libblas (about 7 GFLOP/s) makes any ratio
// meaningless.
type torchBLAS struct {
	Library        string  `json:"library"`
	Kind           string  `json:"kind"` // openblas, mkl, blis, reference, unknown
	GEMMGFlops     float64 `json:"gemm_gflops"`
	Core           string  `json:"core,omitempty"`         // OpenBLAS's kernels (openblas_get_corename)
	CoreTypeEnv    string  `json:"coretype_env,omitempty"` // OPENBLAS_CORETYPE in the reference's environment
	OMPWaitPolicy  string  `json:"omp_wait_policy,omitempty"`
	OpenBLASThread string  `json:"openblas_threads,omitempty"`
}

func runBenchSampling(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("bench sampling", "tuft-bench sampling [--preset NAME | --model DIR] [--requests N] [--adapters M] [--tenants T] [--torch auto|on|off] [--json] [flags]",
		"Measure the continuous-batching scheduler: N concurrent one-sample requests over M adapters and T tenants, against one request of N samples and the PyTorch reference's batched multi-LoRA decode.")
	var o samplingOptions
	o.modelFlags.register(fs)
	fs.IntVar(&o.requests, "requests", 16, "concurrent one-sample requests (and the samples of the single request)")
	fs.IntVar(&o.adapters, "adapters", 4, "LoRA adapters the requests use (request i uses adapter i mod M)")
	fs.IntVar(&o.tenants, "tenants", 4, "tenants the requests come from (request i is tenant i mod T's)")
	fs.IntVar(&o.promptTokens, "prompt-tokens", 32, "tokens of each request's prompt (a different prompt per request)")
	fs.IntVar(&o.sampleTokens, "sample-tokens", 64, "new tokens per sample (no stop at EOS)")
	fs.IntVar(&o.rank, "rank", 16, "LoRA rank of the adapters (q, k, v, o, gate, up, down)")
	fs.Int64Var(&o.seed, "seed", 0, "seed of the adapters' weights and of sampling")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds of both phases, alternated; medians are reported")
	d := backend.DefaultSchedConfig()
	// Every number from engine.scheduler's defaults (the scheduler keeps none of its own); the flags override some.
	o.sched = d
	fs.IntVar(&o.sched.MaxBatchSeqs, "max-batch", d.MaxBatchSeqs, "engine.scheduler.max_batch_size")
	fs.IntVar(&o.sched.StepTokens, "step-tokens", d.StepTokens, "engine.scheduler.step_token_budget")
	fs.IntVar(&o.sched.PrefillChunk, "prefill-chunk", d.PrefillChunk, "engine.scheduler.prefill_chunk_tokens")
	fs.IntVar(&o.kvMiB, "kv-cache-mib", int(d.KVCacheBytes>>20), "engine.scheduler.kv_cache_bytes, in MiB")
	o.torchFlags.register(fs, "tools/torchref/bench_sampling.py")
	fs.BoolVar(&o.jsonOut, "json", false, "print JSON instead of a table")
	fs.StringVar(&o.device, "device", "cpu", "device of the Go engine: cpu, cuda, cuda:N or auto (the PyTorch reference stays on the CPU: use --torch off with a GPU)")
	fs.StringVar(&o.cudaLibDirs, "cuda-lib-dirs", "", "directories searched first for libcuda and cuBLAS (as engine.cuda_lib_dirs)")
	fs.BoolVar(&o.cudaGraphs, "cuda-graphs", config.Default("").Engine.CUDAGraphs, "decode steps as CUDA graphs (engine.cuda_graphs)")
	fs.BoolVar(&o.cudaGEMV, "cuda-gemv", config.Default("").Engine.CUDAGEMV, "batch-1 products with bfloat16 weights by the engine's kernel, not cuBLAS (engine.cuda_gemv)")
	if err := fs.ParseArgs(args); err != nil {
		return err
	}
	if _, _, err := engine.ParseDevice(o.device); err != nil {
		return fmt.Errorf("--device: %w", err)
	}
	switch {
	case o.requests < 1 || o.adapters < 1 || o.tenants < 1 || o.promptTokens < 1 || o.sampleTokens < 1 || o.rank < 1 || o.rounds < 1:
		return fmt.Errorf("--requests, --adapters, --tenants, --prompt-tokens, --sample-tokens, --rank and --rounds must be ≥ 1")
	case o.checkMode() != nil:
		return o.checkMode()
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	o.sched.KVCacheBytes = int64(o.kvMiB) << 20
	o.sched.PrefixCacheEntries = d.PrefixCacheEntries
	logf := progressLog(stderr)

	rep := samplingReport{Adapters: o.adapters, Tenants: o.tenants, Rank: o.rank, PromptTokens: o.promptTokens,
		SampleTokens: o.sampleTokens, CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), TargetRatio: 0.8, TargetTenants: 1.2}
	dir, preset, cleanup, err := o.open(logf)
	if err != nil {
		return err
	}
	defer cleanup()
	rep.Preset, rep.ModelDir = preset, dir
	python, script, skipped, err := o.reference(func(python, script string) (string, string, string) {
		return findTorchScript(python, script, "bench_sampling.py")
	})
	if err != nil {
		return err
	}
	rep.TorchSkipped = skipped
	rep.GoGEMMGFlops = goGEMMGFlops()
	logf("Go GEMM (1024×1024×1024 float32): %.1f GFLOP/s", rep.GoGEMMGFlops)
	if err := benchSamplingGo(dir, o, &rep, logf); err != nil {
		return err
	}
	runtime.GC()
	if python != "" {
		ts, err := benchSamplingTorch(python, script, dir, o, stderr)
		switch {
		case err != nil && o.torch == "on":
			return err
		case err != nil:
			rep.TorchSkipped = "reference run failed: " + err.Error()
		default:
			rep.Torch = ts
			if why := crippledReference(ts.BLAS, rep.GoGEMMGFlops); why != "" {
				rep.TorchRefusal = why
			} else if ts.Batched.TokensPerS > 0 {
				rep.TorchRatio = rep.Concurrent.TokensPerS / ts.Batched.TokensPerS
			}
		}
	}
	return writeReport(stdout, o.jsonOut, &rep, printSampling)
}

// ttftRecorder collects the first_token events' time to first token from the
// executor's sampling spans.
type ttftRecorder struct {
	mu sync.Mutex
	ms []float64
}

func (r *ttftRecorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *ttftRecorder) Shutdown(context.Context) error                  { return nil }
func (r *ttftRecorder) ForceFlush(context.Context) error                { return nil }
func (r *ttftRecorder) OnEnd(s sdktrace.ReadOnlySpan) {
	for _, e := range s.Events() {
		if e.Name != telemetry.EventFirstToken {
			continue
		}
		for _, a := range e.Attributes {
			if a.Key == attribute.Key(telemetry.AttrTimeToFirstToken) {
				r.mu.Lock()
				r.ms = append(r.ms, a.Value.AsFloat64())
				r.mu.Unlock()
			}
		}
	}
}

func (r *ttftRecorder) take() []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.ms
	r.ms = nil
	return out
}

func benchSamplingGo(dir string, o samplingOptions, rep *samplingReport, logf func(string, ...any)) error {
	ctx := context.Background()
	dev, why, err := engine.OpenDevice(o.device, engine.DeviceOptions{CUDALibDirs: filepath.SplitList(o.cudaLibDirs),
		CUDAGraphs: o.cudaGraphs, CUDAGraphsMax: config.Default("").Engine.CUDAGraphsMax, CUDANoGEMV: !o.cudaGEMV, CPUPrepackBytes: config.Default("").Engine.CPUPrepackBytes})
	if err != nil {
		return err
	}
	rep.Device = dev.Name()
	logf("device %s (%s)", dev.Name(), why)
	m, err := engine.Load(dir, "bench", engine.OnDevice(dev))
	if err != nil {
		return err
	}
	if o.promptTokens+o.sampleTokens > m.Cfg.MaxPositions {
		return fmt.Errorf("the model has %d positions: --prompt-tokens plus --sample-tokens is too many", m.Cfg.MaxPositions)
	}
	m.Cfg.EOSTokenIDs = nil // exactly --sample-tokens per sample, as the reference
	rep.Arch, rep.Layers, rep.Hidden, rep.Vocab = m.Cfg.Arch, m.Cfg.Layers, m.Cfg.Hidden, m.Cfg.VocabSize
	rec := &ttftRecorder{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(ctx)
	local := backend.NewLocalWith([]*engine.Model{m}, []backend.ModelInfo{{Name: "bench", Config: m.Cfg}}, o.sched, telemetry.WithTracerProvider(tp))
	defer local.Close()
	rep.Sched = o.sched
	names := make([]string, o.adapters)
	for i := range names {
		names[i] = fmt.Sprintf("adapter%d", i)
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("tuft-bench-adapter-%d-%d", os.Getpid(), i))
		if err := benchAdapter(m, o, i, dir); err != nil {
			return err
		}
		err := local.LoadState(ctx, "bench", names[i], dir, false, engine.OptimizerConfig{})
		os.RemoveAll(dir)
		if err != nil {
			return err
		}
	}
	req := func(i, samples int) engine.SampleRequest {
		seed := o.seed + int64(i)
		return engine.SampleRequest{Prompt: benchTokens(o.promptTokens, m.Cfg.VocabSize, 101+7*i), NumSamples: samples,
			Params: engine.SampleParams{MaxTokens: o.sampleTokens, Temperature: 1, TopK: -1, TopP: 1, Seed: &seed}}
	}
	// Warm-up: the pool, the kernels' scratch, the adapters' first use.
	if _, err := local.Sample(ctx, "bench", names[0], req(1, 2)); err != nil {
		return err
	}
	rec.take()

	// Rounds alternate the two phases (single first in odd rounds, concurrent first in
	// even ones), each with prompts of its own (no prefix-cache hits), so that a busy
	// machine slows both alike; the ratio reported is the median of the rounds' ratios.
	single := func(round int) (samplingPhase, error) {
		c0 := countsOf(dev)
		t0 := time.Now()
		res, err := local.Sample(backend.WithTenant(ctx, "tenant0"), "bench", names[0], req(10000*(round+1)+999, o.requests))
		if err != nil {
			return samplingPhase{}, err
		}
		dt := time.Since(t0).Seconds()
		p := samplingPhase{Requests: 1, Samples: o.requests, OutputTokens: res.OutputTokens, Seconds: dt, TokensPerS: float64(res.OutputTokens) / dt}
		p.since(dev, c0)
		return p, nil
	}
	type done struct {
		tenant string
		tokens int
		at     time.Duration
		err    error
	}
	tenantTokens := map[string]int{}
	tenantTime := map[string]time.Duration{}
	concurrent := func(round int) (samplingPhase, error) {
		stats0, c0 := backendStats(local), countsOf(dev)
		out := make(chan done, o.requests)
		t0 := time.Now()
		for i := 0; i < o.requests; i++ {
			tenant := fmt.Sprintf("tenant%d", i%o.tenants)
			go func() {
				r, err := local.Sample(backend.WithTenant(ctx, tenant), "bench", names[i%o.adapters], req(10000*(round+1)+i, 1))
				out <- done{tenant: tenant, tokens: r.OutputTokens, at: time.Since(t0), err: err}
			}()
		}
		tokens := 0
		last := map[string]time.Duration{}
		var firstErr error
		for i := 0; i < o.requests; i++ {
			d := <-out
			if d.err != nil && firstErr == nil {
				firstErr = d.err
			}
			tokens += d.tokens
			tenantTokens[d.tenant] += d.tokens
			last[d.tenant] = max(last[d.tenant], d.at)
		}
		if firstErr != nil {
			return samplingPhase{}, firstErr
		}
		for tn, at := range last {
			tenantTime[tn] += at
		}
		dt := time.Since(t0).Seconds()
		st := backendStats(local)
		p := samplingPhase{Requests: o.requests, Samples: 1, OutputTokens: tokens, Seconds: dt, TokensPerS: float64(tokens) / dt,
			MaxBatch: st.MaxRows, Steps: st.Steps - stats0.Steps, Preemptions: st.Preemptions - stats0.Preemptions,
			PrefixHitToks: st.PrefixHitTokens - stats0.PrefixHitTokens}
		p.since(dev, c0)
		return p, nil
	}
	var singles, concs []samplingPhase
	var ratios, ttftSingle, ttftConc []float64
	for round := 0; round < o.rounds; round++ {
		var a, c samplingPhase
		var err error
		if round%2 == 0 {
			if a, err = single(round); err == nil {
				ttftSingle = append(ttftSingle, rec.take()...)
				c, err = concurrent(round)
				ttftConc = append(ttftConc, rec.take()...)
			}
		} else {
			if c, err = concurrent(round); err == nil {
				ttftConc = append(ttftConc, rec.take()...)
				a, err = single(round)
				ttftSingle = append(ttftSingle, rec.take()...)
			}
		}
		if err != nil {
			return err
		}
		singles, concs = append(singles, a), append(concs, c)
		ratios = append(ratios, c.TokensPerS/a.TokensPerS)
		logf("round %d: one request of %d samples %.1f tok/s; %d concurrent requests over %d adapters and %d tenants %.1f tok/s (%.2f)",
			round+1, o.requests, a.TokensPerS, o.requests, o.adapters, o.tenants, c.TokensPerS, c.TokensPerS/a.TokensPerS)
	}
	rep.Rounds, rep.RoundRatios = o.rounds, ratios
	rep.Single = medianPhase(singles)
	rep.Single.TTFTP50Ms, rep.Single.TTFTP99Ms = percentiles(ttftSingle)
	c := medianPhase(concs)
	c.TTFTP50Ms, c.TTFTP99Ms = percentiles(ttftConc)
	c.TenantTPS = map[string]float64{}
	lo, hi := 0.0, 0.0
	for tn, n := range tenantTokens {
		tps := float64(n) / tenantTime[tn].Seconds()
		c.TenantTPS[tn] = tps
		if lo == 0 || tps < lo {
			lo = tps
		}
		hi = max(hi, tps)
	}
	if lo > 0 {
		c.TenantRatio = hi / lo
	}
	rep.Concurrent = c
	rep.Ratio = median(ratios)
	return nil
}

// medianPhase is the round with the median tokens/s.
func medianPhase(ps []samplingPhase) samplingPhase {
	s := append([]samplingPhase(nil), ps...)
	sort.Slice(s, func(i, j int) bool { return s[i].TokensPerS < s[j].TokensPerS })
	return s[len(s)/2]
}

// backendStats reads the scheduler counters through the executor's exported view.
func backendStats(l *backend.Local) backend.SchedStats {
	st, _ := l.SchedulerStats("bench")
	return st
}

// benchAdapter writes adapter i: PEFT initialisation with B made non-zero, so every
// adapter changes the model (a zero B would make them all the base model).
func benchAdapter(m *engine.Model, o samplingOptions, i int, dir string) error {
	a, err := m.NewAdapter(engine.LoraConfig{Rank: o.rank, Alpha: float64(o.rank), Seed: o.seed + int64(i), TrainAttn: true, TrainMLP: true})
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(o.seed)+uint64(i), 17))
	for _, layer := range a.W.Layers {
		for _, p := range layer {
			if p == nil {
				continue
			}
			for k := range p.B {
				p.B[k] = float32(rng.NormFloat64() * 0.01)
			}
		}
	}
	return m.SaveAdapter(a, dir, false)
}

func percentiles(ms []float64) (p50, p99 float64) {
	if len(ms) == 0 {
		return 0, 0
	}
	s := append([]float64(nil), ms...)
	sort.Float64s(s)
	at := func(q float64) float64 { return s[min(len(s)-1, int(q*float64(len(s)-1)+0.5))] }
	return at(0.5), at(0.99)
}

func printSampling(w io.Writer, r *samplingReport) {
	name := r.Preset
	if name == "" {
		name = r.ModelDir
	}
	dev := r.Device
	if dev == "" {
		dev = "cpu"
	}
	fmt.Fprintf(w, "tuft-bench sampling: %s (%s, %d layers, hidden %d, vocab %d) on %s, %d CPUs, GOMAXPROCS %d\n", name, r.Arch, r.Layers, r.Hidden, r.Vocab, dev, r.CPUs, r.GOMAXPROCS)
	fmt.Fprintf(w, "%d-token prompts, %d new tokens per sample (temperature 1, no stop at EOS); LoRA rank %d on q,k,v,o,gate,up,down\n",
		r.PromptTokens, r.SampleTokens, r.Rank)
	sc := r.Sched
	fmt.Fprintf(w, "scheduler: max_batch_size %d, step_token_budget %d, prefill_chunk_tokens %d, kv_cache_bytes %d MiB\n\n",
		sc.MaxBatchSeqs, sc.StepTokens, sc.PrefillChunk, sc.KVCacheBytes>>20)
	row := func(label string, p samplingPhase) {
		fmt.Fprintf(w, "%-58s %8.1f tok/s  %6d tokens in %6.2fs", label, p.TokensPerS, p.OutputTokens, p.Seconds)
		if p.TTFTP50Ms > 0 {
			fmt.Fprintf(w, "  TTFT p50 %6.0f ms, p99 %6.0f ms", p.TTFTP50Ms, p.TTFTP99Ms)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "median of %d rounds (the two phases alternated, fresh prompts each)\n", r.Rounds)
	row(fmt.Sprintf("(a) one request of %d samples (one prompt, forked caches)", r.Single.Samples), r.Single)
	row(fmt.Sprintf("%d concurrent 1-sample requests, %d adapters, %d tenants", r.Concurrent.Requests, r.Adapters, r.Tenants), r.Concurrent)
	c := r.Concurrent
	fmt.Fprintf(w, "    decode steps %d, largest batch %d sequences, preemptions %d, prefix-cache hit tokens %d\n", c.Steps, c.MaxBatch, c.Preemptions, c.PrefixHitToks)
	var tenants []string
	for t := range c.TenantTPS {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	fmt.Fprint(w, "    per tenant tok/s:")
	for _, t := range tenants {
		fmt.Fprintf(w, " %s %.1f", t, c.TenantTPS[t])
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	verdict := func(ok bool) string {
		if ok {
			return "meets"
		}
		return "MISSES"
	}
	rs := make([]string, len(r.RoundRatios))
	for i, x := range r.RoundRatios {
		rs[i] = fmt.Sprintf("%.2f", x)
	}
	fmt.Fprintf(w, "concurrent / single-request tokens/s: %.2f (rounds %s; target ≥ %.1f: %s)\n", r.Ratio, strings.Join(rs, " "), r.TargetRatio, verdict(r.Ratio >= r.TargetRatio))
	fmt.Fprintf(w, "per-tenant throughput max/min:        %.2f (target ≤ %.1f: %s)\n", c.TenantRatio, r.TargetTenants, verdict(c.TenantRatio <= r.TargetTenants))
	fmt.Fprintf(w, "Go GEMM 1024³ float32: %.1f GFLOP/s\n", r.GoGEMMGFlops)
	t := r.Torch
	if t == nil {
		fmt.Fprintf(w, "(b) PyTorch reference skipped: %s\n", r.TorchSkipped)
		return
	}
	fmt.Fprintf(w, "(b) PyTorch %s, %d threads (OMP_WAIT_POLICY=%s), BLAS %s (%s): GEMM 1024³ %.1f GFLOP/s\n", t.TorchVersion, t.Threads,
		t.BLAS.OMPWaitPolicy, t.BLAS.describe(), t.BLAS.Library, t.BLAS.GEMMGFlops)
	fmt.Fprintf(w, "    one request of %d samples:                    %8.1f tok/s\n", t.Single.Batch, t.Single.TokensPerS)
	fmt.Fprintf(w, "    batched multi-LoRA decode of %d prompts:       %8.1f tok/s\n", t.Batched.Batch, t.Batched.TokensPerS)
	if r.TorchRefusal != "" {
		fmt.Fprintf(w, "Go/PyTorch ratio not printed: %s\n", r.TorchRefusal)
		return
	}
	fmt.Fprintf(w, "concurrent (Go scheduler) / PyTorch batched decode: %.2fx\n", r.TorchRatio)
}
