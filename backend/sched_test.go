package backend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/tuft-go/tuft/engine"
)

// schedLocal hosts the tiny preset (without EOS, so generations run their length) with
// the given scheduler configuration.
func schedLocal(t *testing.T, sc SchedConfig) (*Local, *engine.Model) {
	t.Helper()
	dir := t.TempDir()
	if err := engine.WritePreset("tiny", dir); err != nil {
		t.Fatal(err)
	}
	m, err := engine.Load(dir, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	m.Cfg.EOSTokenIDs = nil
	l := NewLocalWith([]*engine.Model{m}, []ModelInfo{{Name: "tiny", Config: m.Cfg}}, sc)
	t.Cleanup(func() { l.Close() })
	return l, m
}

// addAdapter creates adapter name with random (non-zero) weights, so it samples
// differently from the base model and from other adapters.
func addAdapter(t *testing.T, l *Local, name string, seed uint64) *engine.LoraWeights[float32] {
	t.Helper()
	if err := l.CreateAdapter(context.Background(), "tiny", name, engine.LoraConfig{Rank: 4, TrainAttn: true, TrainMLP: true}); err != nil {
		t.Fatal(err)
	}
	s, _ := l.slot("tiny", name)
	rng := rand.New(rand.NewPCG(seed, 11))
	for _, layer := range s.a.W.Layers {
		for _, p := range layer {
			if p == nil {
				continue
			}
			for i := range p.A {
				p.A[i] = float32(rng.NormFloat64() * 0.05)
			}
			for i := range p.B {
				p.B[i] = float32(rng.NormFloat64() * 0.05)
			}
		}
	}
	return &s.a.W
}

func prompt(n, salt int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((i*37+salt*101)%500 + 1)
	}
	return p
}

type sampleCase struct {
	tenant, lora string
	req          engine.SampleRequest
}

func seeded(p []int32, samples, maxTokens int, temp float64, seed int64) engine.SampleRequest {
	return engine.SampleRequest{Prompt: p, NumSamples: samples,
		Params: engine.SampleParams{MaxTokens: maxTokens, Temperature: temp, TopK: -1, TopP: 1, Seed: &seed}}
}

// runConcurrently submits every case while the scheduler is held, then lets it run them
// together.
func runConcurrently(t *testing.T, l *Local, cases []sampleCase, ctxs ...context.Context) ([]engine.SampleResult, []error) {
	t.Helper()
	h := l.models["tiny"]
	release := holdLoop(t, h.sched)
	res := make([]engine.SampleResult, len(cases))
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		ctx := context.Background()
		if i < len(ctxs) && ctxs[i] != nil {
			ctx = ctxs[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = l.Sample(WithTenant(ctx, c.tenant), "tiny", c.lora, c.req)
		}()
	}
	waitQueued(h.sched, len(cases))
	release()
	wg.Wait()
	return res, errs
}

// sameAsAlone checks a result against the engine sampling the request by itself: the
// same tokens and stop reasons, logprobs equal to float32 rounding (the batch's matrix
// products add in another order).
func sameAsAlone(t *testing.T, what string, m *engine.Model, lw *engine.LoraWeights[float32], req engine.SampleRequest, got engine.SampleResult) {
	t.Helper()
	want, err := m.Sample(context.Background(), lw, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Sequences) != len(want.Sequences) {
		t.Fatalf("%s: %d sequences, alone %d", what, len(got.Sequences), len(want.Sequences))
	}
	for i, w := range want.Sequences {
		g := got.Sequences[i]
		if fmt.Sprint(g.Tokens) != fmt.Sprint(w.Tokens) || g.StopReason != w.StopReason {
			t.Fatalf("%s sample %d: tokens %v (%s), alone %v (%s)", what, i, g.Tokens, g.StopReason, w.Tokens, w.StopReason)
		}
		for j := range w.Logprobs {
			if math.Abs(float64(g.Logprobs[j]-w.Logprobs[j])) > 1e-4 {
				t.Fatalf("%s sample %d token %d: logprob %v, alone %v", what, i, j, g.Logprobs[j], w.Logprobs[j])
			}
		}
	}
	for j := range want.PromptLogprobs {
		g, w := got.PromptLogprobs[j], want.PromptLogprobs[j]
		if !(math.IsNaN(float64(g)) && math.IsNaN(float64(w))) && math.Abs(float64(g-w)) > 1e-4 {
			t.Fatalf("%s prompt logprob %d: %v, alone %v", what, j, g, w)
		}
	}
	for j := range want.TopKPrompt {
		if len(got.TopKPrompt[j]) != len(want.TopKPrompt[j]) {
			t.Fatalf("%s top-k prompt logprobs at %d: %v, alone %v", what, j, got.TopKPrompt[j], want.TopKPrompt[j])
		}
		for k, w := range want.TopKPrompt[j] {
			if g := got.TopKPrompt[j][k]; g.Token != w.Token || math.Abs(float64(g.Logprob-w.Logprob)) > 1e-4 {
				t.Fatalf("%s top-k prompt logprobs at %d: %v, alone %v", what, j, got.TopKPrompt[j], want.TopKPrompt[j])
			}
		}
	}
	samePromptOutputs(t, what, want, got)
	if got.OutputTokens != want.OutputTokens || got.PromptTokens != want.PromptTokens {
		t.Fatalf("%s: %d/%d tokens, alone %d/%d", what, got.PromptTokens, got.OutputTokens, want.PromptTokens, want.OutputTokens)
	}
}

// samePromptOutputs compares the newer sampling outputs (top-k of sampled tokens, target
// prompt logprobs, alternative prompt tokens) with the engine's alone.
func samePromptOutputs(t *testing.T, what string, want, got engine.SampleResult) {
	t.Helper()
	close := func(a, b float32) bool { return math.Abs(float64(a-b)) <= 1e-4 }
	for i, w := range want.Sequences {
		g := got.Sequences[i]
		if len(g.TopK) != len(w.TopK) {
			t.Fatalf("%s sample %d: %d top-k rows, alone %d", what, i, len(g.TopK), len(w.TopK))
		}
		for j := range w.TopK {
			if len(g.TopK[j]) != len(w.TopK[j]) {
				t.Fatalf("%s sample %d token %d: top-k %v, alone %v", what, i, j, g.TopK[j], w.TopK[j])
			}
			for k, e := range w.TopK[j] {
				if g.TopK[j][k].Token != e.Token || !close(g.TopK[j][k].Logprob, e.Logprob) {
					t.Fatalf("%s sample %d token %d: top-k %v, alone %v", what, i, j, g.TopK[j], w.TopK[j])
				}
			}
		}
	}
	if (got.PromptTargetLogprobs == nil) != (want.PromptTargetLogprobs == nil) {
		t.Fatalf("%s: target logprobs %v, alone %v", what, got.PromptTargetLogprobs, want.PromptTargetLogprobs)
	}
	if w := want.PromptTargetLogprobs; w != nil {
		g := got.PromptTargetLogprobs
		if g.Rows != w.Rows || g.Cols != w.Cols || len(g.Logprobs) != len(w.Logprobs) || fmt.Sprint(g.RowStarts, g.ColIdx) != fmt.Sprint(w.RowStarts, w.ColIdx) {
			t.Fatalf("%s: target logprobs layout %+v, alone %+v", what, g, w)
		}
		for x := range w.Logprobs {
			if !close(g.Logprobs[x], w.Logprobs[x]) {
				t.Fatalf("%s: target logprob %d: %v, alone %v", what, x, g.Logprobs[x], w.Logprobs[x])
			}
		}
	}
	if (got.PromptAltTokens == nil) != (want.PromptAltTokens == nil) {
		t.Fatalf("%s: alternative tokens %v, alone %v", what, got.PromptAltTokens, want.PromptAltTokens)
	}
	if w := want.PromptAltTokens; w != nil {
		g := got.PromptAltTokens
		if g.K != w.K || fmt.Sprint(g.Tokens) != fmt.Sprint(w.Tokens) {
			t.Fatalf("%s: alternative tokens %v, alone %v", what, g.Tokens, w.Tokens)
		}
		for x := range w.Logprobs {
			if !close(g.Logprobs[x], w.Logprobs[x]) {
				t.Fatalf("%s: alternative token logprob %d: %v, alone %v", what, x, g.Logprobs[x], w.Logprobs[x])
			}
		}
	}
}

// withOutputs asks req for the newer sampling outputs: top-k of sampled tokens, target
// logprobs of the next prompt token and of a fixed id from row first on (CSR when
// sparse), and k alternative tokens (when k > 0).
func withOutputs(req engine.SampleRequest, topk, first, k int, sparse bool) engine.SampleRequest {
	req.TopKSampleLogprobs, req.PromptAltTokensK = topk, k
	rows := len(req.Prompt) - 1
	t := &engine.PromptTargets{Rows: rows, Cols: 2}
	if sparse {
		t.RowStarts = []int{0}
	}
	for r := 0; r < rows; r++ {
		cells := []int32{-1, -1}
		if r >= first {
			cells = []int32{req.Prompt[r+1], int32(7 + r%5)}
		}
		if !sparse {
			t.IDs = append(t.IDs, cells...)
			continue
		}
		for c, id := range cells {
			if id >= 0 {
				t.IDs, t.ColIdx = append(t.IDs, id), append(t.ColIdx, c)
			}
		}
		t.RowStarts = append(t.RowStarts, len(t.IDs))
	}
	req.PromptTargets = t
	return req
}

// The newer sampling outputs through the scheduler: requests of several tenants and
// adapters with prompts longer than a prefill chunk (so their outputs come from several
// steps), run together, give what the engine gives each alone (which
// engine.TestSampleOutputsMatchFullSoftmax checks against the full softmax).
func TestPromptOutputsInTheScheduler(t *testing.T) {
	l, m := schedLocal(t, SchedConfig{StepTokens: 40, PrefillChunk: 16, MaxBatchSeqs: 64})
	lws := map[string]*engine.LoraWeights[float32]{"": nil, "a": addAdapter(t, l, "a", 1), "b": addAdapter(t, l, "b", 2)}
	var cases []sampleCase
	loras := []string{"", "a", "b"}
	for i := 0; i < 6; i++ {
		req := seeded(prompt(20+7*i, i), 1+i%2, 5, []float64{0, 0.8}[i%2], int64(40+i))
		req = withOutputs(req, 1+i, i*3, i%3, i%2 == 1)
		if i == 3 {
			req.PromptLogprobs = true
		}
		cases = append(cases, sampleCase{tenant: fmt.Sprint("t", i%3), lora: loras[i%3], req: req})
	}
	cases = append(cases, sampleCase{tenant: "t0", lora: "a", req: seeded(prompt(30, 9), 2, 6, 1, 3)}) // none asked
	res, errs := runConcurrently(t, l, cases)
	for i, c := range cases {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		sameAsAlone(t, fmt.Sprint("request ", i), m, lws[c.lora], c.req, res[i])
	}
	if st := &l.models["tiny"].sched.stats; st.maxRows.Load() < 4 {
		t.Fatalf("at most %d sequences ran in one step: the requests were not batched", st.maxRows.Load())
	}
	if r := res[len(res)-1]; r.PromptTargetLogprobs != nil || r.PromptAltTokens != nil || r.Sequences[0].TopK != nil {
		t.Fatal("outputs nobody asked for")
	}
}

// A prompt whose prefix is in the prefix cache still gets its prompt outputs: target
// logprobs from a later row on are served from the cache up to that row (whole blocks)
// and computed after it; alternative tokens (which start at row 0) bypass the cache; both
// equal the engine's alone.
func TestPromptOutputsWithThePrefixCache(t *testing.T) {
	l, m := schedLocal(t, SchedConfig{PrefixCacheEntries: 4})
	lw := addAdapter(t, l, "a", 4)
	ctx := context.Background()
	p := prompt(45, 9) // two whole blocks and 13 tokens
	if _, err := l.Sample(ctx, "tiny", "a", seeded(p, 1, 3, 1, 1)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		req   engine.SampleRequest
		hit   int
		first int
	}{
		{"targets from row 36", withOutputs(seeded(p, 2, 4, 0.7, 2), 3, 36, 0, false), 32, 36},
		{"sparse targets from row 20", withOutputs(seeded(p, 1, 4, 0.7, 3), 0, 20, 0, true), 16, 20},
		{"targets from row 0", withOutputs(seeded(p, 1, 4, 0.7, 4), 0, 0, 0, false), 0, 0},
		{"alternative tokens", withOutputs(seeded(p, 1, 4, 0.7, 5), 2, 40, 2, false), 0, 40},
	} {
		got, err := l.Sample(ctx, "tiny", "a", tc.req)
		if err != nil {
			t.Fatal(err)
		}
		if got.PromptCacheHitTokens != tc.hit {
			t.Fatalf("%s: %d cache-hit tokens, want %d", tc.name, got.PromptCacheHitTokens, tc.hit)
		}
		sameAsAlone(t, tc.name, m, lw, tc.req, got)
		nonzero := 0
		for _, lp := range got.PromptTargetLogprobs.Logprobs {
			if lp != 0 {
				nonzero++
			}
		}
		if want := 2 * (len(p) - 1 - tc.first); nonzero != want {
			t.Fatalf("%s: %d target logprobs computed, want %d", tc.name, nonzero, want)
		}
	}
}

// Requests of several tenants and adapters (and the base model), with prompts longer
// than a prefill chunk, several samples, greedy and random draws, and prompt logprobs,
// run in shared decode steps and each samples what it samples alone: every sample has
// its own generator, so the batch around it changes nothing.
func TestBatchedRequestsSampleAsAlone(t *testing.T) {
	l, m := schedLocal(t, SchedConfig{StepTokens: 40, PrefillChunk: 16, MaxBatchSeqs: 64})
	lws := map[string]*engine.LoraWeights[float32]{"": nil, "a": addAdapter(t, l, "a", 1), "b": addAdapter(t, l, "b", 2)}
	var cases []sampleCase
	loras := []string{"", "a", "b"}
	for i := 0; i < 9; i++ {
		req := seeded(prompt(3+5*i, i), 1+i%3, 6+i, []float64{0, 0.9, 1.3}[i%3], int64(100+i))
		if i%4 == 1 {
			req.Params.TopK, req.Params.TopP = 20, 0.9
		}
		if i == 4 {
			req.PromptLogprobs, req.TopKPromptLogprobs = true, 3
		}
		cases = append(cases, sampleCase{tenant: fmt.Sprint("t", i%3), lora: loras[i%3], req: req})
	}
	res, errs := runConcurrently(t, l, cases)
	for i, c := range cases {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		sameAsAlone(t, fmt.Sprint("request ", i), m, lws[c.lora], c.req, res[i])
	}
	st := &l.models["tiny"].sched.stats
	if st.maxRows.Load() < 8 {
		t.Fatalf("at most %d sequences ran in one step: the requests were not batched", st.maxRows.Load())
	}
	// The same request in another batch composition: alone through the scheduler.
	one, err := l.Sample(context.Background(), "tiny", "b", cases[2].req)
	if err != nil {
		t.Fatal(err)
	}
	sameAsAlone(t, "request 2 alone", m, lws["b"], cases[2].req, one)
}

// Sampled logprobs equal the teacher-forced logprobs of the same tokens, also for
// sequences decoded inside a shared batch.
func TestBatchedLogprobsEqualTeacherForced(t *testing.T) {
	l, _ := schedLocal(t, SchedConfig{StepTokens: 32, PrefillChunk: 8})
	addAdapter(t, l, "a", 3)
	cases := []sampleCase{
		{"t0", "a", seeded(prompt(11, 1), 2, 12, 1, 7)},
		{"t1", "", seeded(prompt(21, 2), 1, 9, 1, 8)},
		{"t1", "a", seeded(prompt(5, 3), 3, 10, 1, 9)},
	}
	res, errs := runConcurrently(t, l, cases)
	for i, c := range cases {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		for k, sq := range res[i].Sequences {
			toks := append(append([]int32(nil), c.req.Prompt...), sq.Tokens...)
			fwd, err := l.ForwardBackward(context.Background(), "tiny", c.lora, forwardOnly(toks))
			if err != nil {
				t.Fatal(err)
			}
			lp := fwd.Outputs[0]["logprobs"].F32
			for j, got := range sq.Logprobs {
				want := lp[len(c.req.Prompt)-1+j]
				if math.Abs(float64(got-want)) > 1e-4 {
					t.Fatalf("request %d sample %d token %d: sampled logprob %v, teacher-forced %v", i, k, j, got, want)
				}
			}
		}
	}
}

func forwardOnly(toks []int32) engine.ForwardRequest {
	r := ce(toks)
	r.Backward = false
	return r
}

// A prompt that starts with the same whole blocks as an earlier one of the same adapter
// is served from the prefix cache (and samples what it samples without it); another
// adapter, changed weights, or prompt logprobs get no hit; entries beyond the cap are
// evicted least recently used first.
func TestPrefixCacheHitsAndEviction(t *testing.T) {
	l, m := schedLocal(t, SchedConfig{PrefixCacheEntries: 2})
	lw := addAdapter(t, l, "a", 4)
	addAdapter(t, l, "b", 5)
	ctx := context.Background()
	p := prompt(40, 9) // two whole blocks and 8 tokens
	first, err := l.Sample(ctx, "tiny", "a", seeded(p, 2, 5, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	if first.PromptCacheHitTokens != 0 {
		t.Fatalf("first request: %d cache-hit tokens", first.PromptCacheHitTokens)
	}
	longer := append(append([]int32(nil), p...), 3, 4, 5)
	req := seeded(longer, 3, 6, 0.8, 2)
	again, err := l.Sample(ctx, "tiny", "a", req)
	if err != nil {
		t.Fatal(err)
	}
	if again.PromptCacheHitTokens != 32 {
		t.Fatalf("same prefix, same adapter: %d cache-hit tokens, want 32", again.PromptCacheHitTokens)
	}
	sameAsAlone(t, "cache hit", m, lw, req, again)
	if r, _ := l.Sample(ctx, "tiny", "b", seeded(p, 1, 3, 1, 1)); r.PromptCacheHitTokens != 0 {
		t.Fatalf("another adapter hit %d tokens of a's cache", r.PromptCacheHitTokens)
	}
	withLP := seeded(p, 1, 3, 1, 1)
	withLP.PromptLogprobs = true
	if r, _ := l.Sample(ctx, "tiny", "a", withLP); r.PromptCacheHitTokens != 0 {
		t.Fatalf("prompt logprobs served %d tokens from the cache", r.PromptCacheHitTokens)
	}
	// New weights: the cached keys and values are stale.
	if _, err := l.OptimStep(ctx, "tiny", "a", engine.StepParams{Adam: engine.AdamParams{LearningRate: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}}); err != nil {
		t.Fatal(err)
	}
	if r, _ := l.Sample(ctx, "tiny", "a", seeded(p, 1, 3, 1, 1)); r.PromptCacheHitTokens != 0 {
		t.Fatalf("after optim_step: %d cache-hit tokens", r.PromptCacheHitTokens)
	}
	// Three more prompts with a cap of two entries: the oldest goes.
	for i := 0; i < 3; i++ {
		if _, err := l.Sample(ctx, "tiny", "", seeded(prompt(33, 20+i), 1, 2, 0, 1)); err != nil {
			t.Fatal(err)
		}
	}
	pc := l.models["tiny"].sched.prefix
	if pc.len() != 2 {
		t.Fatalf("%d entries, cap 2", pc.len())
	}
	if r, _ := l.Sample(ctx, "tiny", "", seeded(prompt(33, 20), 1, 2, 0, 1)); r.PromptCacheHitTokens != 0 {
		t.Fatal("the least recently used entry was not evicted")
	}
	if r, _ := l.Sample(ctx, "tiny", "", seeded(prompt(33, 22), 1, 2, 0, 1)); r.PromptCacheHitTokens != 32 {
		t.Fatalf("the most recent entry: %d cache-hit tokens, want 32", r.PromptCacheHitTokens)
	}
	// Removing the adapter drops its entries.
	l.Sample(ctx, "tiny", "b", seeded(p, 1, 2, 1, 1))
	l.RemoveAdapter(ctx, "tiny", "b")
	for el := pc.lru.Front(); el != nil; el = el.Next() {
		if adapterOfKey(el.Value.(*prefixEntry).key) == "b" {
			t.Fatal("a removed adapter's prompts stay cached")
		}
	}
}

// With a KV cache far smaller than the demand, every request still completes with the
// tokens it samples alone: work waits for memory and running sequences are preempted and
// recomputed; cached prefixes are evicted under pressure; a request that can never fit
// is refused naming the key; everything is given back at the end.
func TestMemoryBudgetAdmitsAndPreempts(t *testing.T) {
	// Ten 16-position blocks of the tiny model (64 KiB each).
	l, m := schedLocal(t, SchedConfig{KVCacheBytes: 10 << 16, PrefixCacheEntries: 4, StepTokens: 64, PrefillChunk: 32})
	lw := addAdapter(t, l, "a", 6)
	var cases []sampleCase
	for i := 0; i < 6; i++ {
		req := seeded(prompt(20, i), 2, 40, 1, int64(i))
		if i%2 == 1 { // preempted prompts and samples recompute their outputs the same
			req = withOutputs(req, 3, 2, 2, i == 3)
		}
		cases = append(cases, sampleCase{tenant: fmt.Sprint("t", i%2), lora: "a", req: req})
	}
	res, errs := runConcurrently(t, l, cases)
	for i, c := range cases {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		sameAsAlone(t, fmt.Sprint("request ", i), m, lw, c.req, res[i])
	}
	s := l.models["tiny"].sched
	if s.stats.preemptions.Load() == 0 {
		t.Fatal("48 blocks of demand on 10 blocks preempted nothing")
	}
	t.Logf("%d preemptions, %d steps", s.stats.preemptions.Load(), s.stats.steps.Load())
	_, err := l.Sample(context.Background(), "tiny", "a", seeded(prompt(100, 1), 1, 100, 1, 1))
	var ie *engine.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "kv_cache_bytes") {
		t.Fatalf("a request larger than the KV cache: %v", err)
	}
	s.prefix.drop(func(string) bool { return true })
	if f := s.pool.FreeBlocks(); f != s.pool.Blocks() {
		t.Fatalf("%d of %d blocks free after every request ended", f, s.pool.Blocks())
	}
}

// A cancelled request leaves the batch before the next step, the others go on
// unchanged; an expired deadline never runs; memory comes back.
func TestCancelAndDeadlineLeaveAtTheNextStep(t *testing.T) {
	l, m := schedLocal(t, SchedConfig{PrefixCacheEntries: -1})
	s := l.models["tiny"].sched
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	steps, after := 0, 0
	cancelled := false
	s.hooks.step = func(p []planned) {
		mu.Lock()
		defer mu.Unlock()
		steps++
		for _, x := range p {
			if x.u.r.ctx == ctx && cancelled {
				after++
			}
		}
		if steps == 3 {
			cancel()
			cancelled = true
		}
	}
	keep := seeded(prompt(7, 1), 2, 20, 1, 5)
	cases := []sampleCase{{"t0", "", seeded(prompt(9, 2), 2, 200, 1, 4)}, {"t1", "", keep}}
	res, errs := runConcurrently(t, l, cases, WithTenant(ctx, "t0"))
	if !errors.Is(errs[0], context.Canceled) {
		t.Fatalf("cancelled request: %v", errs[0])
	}
	if after != 0 {
		t.Fatalf("the cancelled request ran in %d steps after its cancellation", after)
	}
	if errs[1] != nil {
		t.Fatal(errs[1])
	}
	sameAsAlone(t, "the other request", m, nil, keep, res[1])
	dctx, dcancel := context.WithTimeout(context.Background(), 0)
	defer dcancel()
	before := s.stats.steps.Load()
	if _, err := l.Sample(dctx, "tiny", "", keep); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expired deadline: %v", err)
	}
	if s.stats.steps.Load() != before {
		t.Fatal("a request past its deadline ran")
	}
	if f := s.pool.FreeBlocks(); f != s.pool.Blocks() {
		t.Fatalf("%d of %d blocks free", f, s.pool.Blocks())
	}
}

// When the batch is full, tenants share its rows equally whatever their number of
// sequences, and every sequence of a tenant advances.
func TestTenantsShareAFullBatch(t *testing.T) {
	l, _ := schedLocal(t, SchedConfig{MaxBatchSeqs: 6, StepTokens: 6, PrefillChunk: 6})
	s := l.models["tiny"].sched
	perTenant := map[string]int{}
	perSeq := map[*unit]int{}
	var mu sync.Mutex
	s.hooks.step = func(p []planned) {
		mu.Lock()
		defer mu.Unlock()
		tenants := map[string]bool{}
		for _, x := range p {
			if x.u.idx >= 0 {
				tenants[x.u.r.tenant] = true
			}
		}
		if len(tenants) < 3 {
			return // count only steps where all three decode
		}
		for _, x := range p {
			if x.u.idx >= 0 {
				perTenant[x.u.r.tenant] += x.n
				perSeq[x.u]++
			}
		}
	}
	cases := []sampleCase{
		{"big", "", seeded(prompt(4, 1), 12, 30, 1, 1)},
		{"mid", "", seeded(prompt(4, 2), 2, 30, 1, 2)},
		{"mid", "", seeded(prompt(4, 3), 2, 30, 1, 3)},
		{"small", "", seeded(prompt(4, 4), 2, 30, 1, 4)},
	}
	_, errs := runConcurrently(t, l, cases)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	lo, hi := math.MaxInt, 0
	for _, n := range perTenant {
		lo, hi = min(lo, n), max(hi, n)
	}
	t.Logf("tokens per tenant while all decoded: %v", perTenant)
	if len(perTenant) != 3 || float64(hi) > 1.2*float64(lo) {
		t.Fatalf("tokens per tenant %v: max/min above 1.2", perTenant)
	}
	for u, n := range perSeq {
		if u.r.tenant == "big" && n == 0 {
			t.Fatal("a sequence of the big tenant never advanced")
		}
	}
}

// While a tenant floods the model with training, decode steps and training packs
// alternate (never two packs in a row while sampling waits), another tenant's small
// forward_backward joins the first pack, and both tenants' results are right.
func TestTrainingAndSamplingInterleave(t *testing.T) {
	l, m := schedLocal(t, SchedConfig{TrainPackTokens: 64})
	s := l.models["tiny"].sched
	ctx := context.Background()
	var mu sync.Mutex
	var kinds []int
	twoPacks := 0
	s.hooks.kind = func(k int, both bool) {
		mu.Lock()
		defer mu.Unlock()
		if both && k == kindTrain && len(kinds) > 0 && kinds[len(kinds)-1] == kindTrain {
			twoPacks++
		}
		kinds = append(kinds, k)
	}
	victimPack := -1
	packs := 0
	s.hooks.pack = func(calls []*fbCall) {
		mu.Lock()
		defer mu.Unlock()
		packs++
		for _, c := range calls {
			if c.tenant == "victim" && victimPack < 0 {
				victimPack = packs
			}
		}
	}
	release := holdLoop(t, s)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		name := fmt.Sprint("flood", i)
		if err := l.CreateAdapter(ctx, "tiny", name, engine.LoraConfig{Rank: 2, TrainAttn: true}); err != nil {
			t.Fatal(err)
		}
		req := ce(prompt(61, i))
		for j := 0; j < 3; j++ {
			req.Data = append(req.Data, ce(prompt(61, 10*i+j)).Data...)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.ForwardBackward(WithTenant(ctx, "flood"), "tiny", name, req); err != nil {
				t.Error(err)
			}
		}()
	}
	l.CreateAdapter(ctx, "tiny", "v", engine.LoraConfig{Rank: 2, TrainAttn: true})
	var small engine.ForwardResult
	var smallErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		small, smallErr = l.ForwardBackward(WithTenant(ctx, "victim"), "tiny", "v", ce(prompt(9, 7)))
	}()
	sreq := seeded(prompt(6, 3), 2, 24, 1, 3)
	var sres engine.SampleResult
	var serr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		sres, serr = l.Sample(WithTenant(ctx, "victim"), "tiny", "", sreq)
	}()
	waitQueued(s, 6)
	release()
	wg.Wait()
	if smallErr != nil || serr != nil {
		t.Fatal(smallErr, serr)
	}
	if victimPack != 1 {
		t.Fatalf("the victim's 8-token forward_backward ran in pack %d, want the first", victimPack)
	}
	if twoPacks != 0 {
		t.Fatalf("two training packs ran back to back %d times while sampling waited (%v)", twoPacks, kinds)
	}
	sameAsAlone(t, "sample beside training", m, nil, sreq, sres)
	alone := tinyLocal(t)
	alone.CreateAdapter(ctx, "tiny", "v", engine.LoraConfig{Rank: 2, TrainAttn: true})
	want, _ := alone.ForwardBackward(ctx, "tiny", "v", ce(prompt(9, 7)))
	if d := small.Metrics["loss:sum"] - want.Metrics["loss:sum"]; math.Abs(d) > 1e-4 {
		t.Fatalf("victim's loss %v, alone %v", small.Metrics["loss:sum"], want.Metrics["loss:sum"])
	}
}

// A request with 20,000 stop strings (one of which the sample produces) stops where the
// engine stops, without slowing anyone: stop strings are matched on new text only.
func TestManyStopStringsInTheScheduler(t *testing.T) {
	l, m := schedLocal(t, SchedConfig{})
	req := seeded(prompt(5, 1), 1, 16, 1, 2)
	free, err := l.Sample(context.Background(), "tiny", "", req)
	if err != nil {
		t.Fatal(err)
	}
	toks := free.Sequences[0].Tokens
	stop := m.Tok.Decode(toks[4:6])
	for i := 0; i < 20000; i++ {
		req.Params.StopStrings = append(req.Params.StopStrings, fmt.Sprintf("never-%d-%s", i, stop))
	}
	req.Params.StopStrings = append(req.Params.StopStrings, stop)
	got, err := l.Sample(context.Background(), "tiny", "", req)
	if err != nil {
		t.Fatal(err)
	}
	sameAsAlone(t, "20k stop strings", m, nil, req, got)
	if g := got.Sequences[0]; g.StopReason != engine.StopReasonStop || len(g.Tokens) > 6 {
		t.Fatalf("stopped after %d tokens (%s)", len(g.Tokens), g.StopReason)
	}
}

// Close fails queued work with ErrClosed and refuses new work.
func TestCloseFailsQueuedWork(t *testing.T) {
	l, _ := schedLocal(t, SchedConfig{})
	s := l.models["tiny"].sched
	release := holdLoop(t, s)
	done := make(chan error, 1)
	go func() {
		_, err := l.Sample(context.Background(), "tiny", "", seeded(prompt(4, 1), 1, 4, 1, 1))
		done <- err
	}()
	waitQueued(s, 1)
	go func() { release() }()
	l.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("queued work at close: %v", err)
	}
	if _, err := l.Sample(context.Background(), "tiny", "", seeded(prompt(4, 1), 1, 4, 1, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

// Streaming: every token reaches the hook as the step that drew it ends, before the
// request completes, with its top logprobs, and the events add up to the result.
func TestStreamedTokensArriveAsDrawn(t *testing.T) {
	l, _ := schedLocal(t, SchedConfig{})
	s := l.models["tiny"].sched
	var mu sync.Mutex
	steps := 0
	s.hooks.step = func([]planned) { mu.Lock(); steps++; mu.Unlock() }
	var events []engine.TokenEvent
	var stepAt []int
	req := seeded(prompt(6, 2), 2, 9, 1, 4)
	res, err := l.SampleStream(context.Background(), "tiny", "", req, Stream{TopLogprobs: 3, OnToken: func(ev engine.TokenEvent) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
		stepAt = append(stepAt, steps)
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := make([][]int32, 2)
	for i, ev := range events {
		got[ev.Seq] = append(got[ev.Seq], ev.Token)
		if len(ev.Top) != 3 {
			t.Fatalf("event %d: %d top logprobs, want 3", i, len(ev.Top))
		}
		if k := len(got[ev.Seq]); stepAt[i] != k {
			t.Fatalf("token %d of sample %d reported after step %d, want the step that drew it (%d)", k, ev.Seq, stepAt[i], k)
		}
	}
	for i, sq := range res.Sequences {
		if fmt.Sprint(got[i]) != fmt.Sprint(sq.Tokens) {
			t.Fatalf("sample %d: streamed %v, result %v", i, got[i], sq.Tokens)
		}
		if last := events[len(events)-1]; last.Stop == "" && last.Seq == i {
			t.Fatal("the last event carries no stop reason")
		}
	}
}

// Several training calls of one tenant that end together (cancelled while they wait)
// all fail with their context's error and leave their adapters untouched.
func TestCancelledTrainingCallsOfOneTenant(t *testing.T) {
	l, _ := schedLocal(t, SchedConfig{})
	s := l.models["tiny"].sched
	ctx, cancel := context.WithCancel(context.Background())
	release := holdLoop(t, s)
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		name := fmt.Sprint("c", i)
		if err := l.CreateAdapter(context.Background(), "tiny", name, engine.LoraConfig{Rank: 2, TrainAttn: true}); err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := l.ForwardBackward(WithTenant(ctx, "one"), "tiny", name, ce(prompt(9, i)))
			errs <- err
		}()
	}
	waitQueued(s, 3)
	cancel()
	release()
	for i := 0; i < 3; i++ {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if s.stats.packs.Load() != 0 {
		t.Fatal("a cancelled call ran")
	}
}

// IgnoreEOS (the SDK's stop=[]): the model's EOS token does not end a sequence in the
// scheduler either, as in engine.Sample.
func TestIgnoreEOSInTheScheduler(t *testing.T) {
	l, m := schedLocal(t, SchedConfig{})
	req := seeded(prompt(5, 4), 1, 12, 1, 9)
	free, err := l.Sample(context.Background(), "tiny", "", req)
	if err != nil {
		t.Fatal(err)
	}
	eos := free.Sequences[0].Tokens[3] // make the 4th sampled token the model's EOS
	m.Cfg.EOSTokenIDs = []int32{eos}
	if r, _ := l.Sample(context.Background(), "tiny", "", req); len(r.Sequences[0].Tokens) != 4 || r.Sequences[0].StopReason != engine.StopReasonStop {
		t.Fatalf("with EOS %d: %d tokens (%s), want 4 (stop)", eos, len(r.Sequences[0].Tokens), r.Sequences[0].StopReason)
	}
	req.Params.IgnoreEOS = true
	r, err := l.Sample(context.Background(), "tiny", "", req)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Sequences[0].Tokens) != 12 || r.Sequences[0].StopReason != engine.StopReasonLength {
		t.Fatalf("ignoring EOS: %d tokens (%s), want 12 (length)", len(r.Sequences[0].Tokens), r.Sequences[0].StopReason)
	}
	sameAsAlone(t, "ignore EOS", m, nil, req, r)
}

// A panic inside a unit of work fails the requests the loop held, not the process, and
// the model keeps serving.
func TestPanicInAStepFailsItsWorkOnly(t *testing.T) {
	l, _ := schedLocal(t, SchedConfig{})
	s := l.models["tiny"].sched
	var once sync.Once
	s.hooks.step = func([]planned) { once.Do(func() { panic("boom") }) }
	if _, err := l.Sample(context.Background(), "tiny", "", seeded(prompt(4, 1), 1, 4, 1, 1)); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("the request of a panicking step: %v", err)
	}
	if _, err := l.Sample(context.Background(), "tiny", "", seeded(prompt(4, 1), 1, 4, 1, 1)); err != nil {
		t.Fatalf("after the panic: %v", err)
	}
	if f := s.pool.FreeBlocks(); f != s.pool.Blocks() {
		t.Fatalf("%d of %d blocks free after the panic", f, s.pool.Blocks())
	}
}
