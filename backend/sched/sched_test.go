package sched

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
// testSched fills sc's zero numbers from config.Default() (the scheduler keeps no
// defaults of its own); a zero or negative prefix_cache_entries turns the prefix cache off,
// as these tests mean it.
func testSched(c Config) Config {
	d := DefaultConfig()
	if c.MaxBatchSeqs <= 0 {
		c.MaxBatchSeqs = d.MaxBatchSeqs
	}
	if c.StepTokens <= 0 {
		c.StepTokens = d.StepTokens
	}
	if c.PrefillChunk <= 0 {
		c.PrefillChunk = d.PrefillChunk
	}
	if c.KVCacheBytes <= 0 {
		c.KVCacheBytes = d.KVCacheBytes
	}
	c.PrefixCacheEntries = max(c.PrefixCacheEntries, 0)
	if c.TrainPackTokens <= 0 {
		c.TrainPackTokens = d.TrainPackTokens
	}
	if c.TrainShare == 0 {
		c.TrainShare = d.TrainShare
	}
	return c
}

func schedLocal(t *testing.T, sc Config) (*testHost, *engine.Model) {
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
	return newTestHost(t, m, testSched(sc)), m
}

// addAdapter creates adapter name with random (non-zero) weights, so it samples
// differently from the base model and from other adapters.
func addAdapter(t *testing.T, l *testHost, name string, seed uint64) *engine.LoraWeights[float32] {
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
func runConcurrently(t *testing.T, l *testHost, cases []sampleCase, ctxs ...context.Context) ([]engine.SampleResult, []error) {
	t.Helper()
	release := holdLoop(t, l.s)
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
	waitQueued(l.s, len(cases))
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

// Requests of several tenants and adapters (and the base model), with prompts longer
// than a prefill chunk, several samples, greedy and random draws, and prompt logprobs,
// run in shared decode steps and each samples what it samples alone: every sample has
// its own generator, so the batch around it changes nothing.
func TestBatchedRequestsSampleAsAlone(t *testing.T) {
	l, m := schedLocal(t, Config{StepTokens: 40, PrefillChunk: 16, MaxBatchSeqs: 64})
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
	st := &l.s.stats
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
	l, _ := schedLocal(t, Config{StepTokens: 32, PrefillChunk: 8})
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

// A cancelled request leaves the batch before the next step, the others go on
// unchanged; an expired deadline never runs; memory comes back.
func TestCancelAndDeadlineLeaveAtTheNextStep(t *testing.T) {
	l, m := schedLocal(t, Config{PrefixCacheEntries: -1})
	s := l.s
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
	l, _ := schedLocal(t, Config{MaxBatchSeqs: 6, StepTokens: 6, PrefillChunk: 6})
	s := l.s
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
	l, m := schedLocal(t, Config{TrainPackTokens: 64})
	s := l.s
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
	l, m := schedLocal(t, Config{})
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
	l, _ := schedLocal(t, Config{})
	s := l.s
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
	l, _ := schedLocal(t, Config{})
	s := l.s
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
	l, _ := schedLocal(t, Config{})
	s := l.s
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
	l, m := schedLocal(t, Config{})
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
	l, _ := schedLocal(t, Config{})
	s := l.s
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
