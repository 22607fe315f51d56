package engine

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// A pool hands out blocks, shares them between forks and copies a shared block before a
// fork writes into it; releasing every cache frees every block.
func TestKVPoolForkCopyOnWrite(t *testing.T) {
	m := tinyModel(t)
	pool, err := m.NewKVPool(4)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	a := pool.NewCache()
	ctx := context.Background()
	toks := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18} // 18 positions: 2 blocks
	if _, err := m.DecodeStep(ctx, []StepSeq{{Cache: a, Tokens: toks}}); err != nil {
		t.Fatal(err)
	}
	if a.Len() != 18 || pool.FreeBlocks() != 2 {
		t.Fatalf("len %d, %d free blocks; want 18 and 2", a.Len(), pool.FreeBlocks())
	}
	b := a.Fork()
	if pool.FreeBlocks() != 2 {
		t.Fatal("a fork took blocks before writing")
	}
	// b writes into the shared, partly filled block: it gets its own copy.
	if _, err := m.DecodeStep(ctx, []StepSeq{{Cache: b, Tokens: []int32{40}}}); err != nil {
		t.Fatal(err)
	}
	if pool.FreeBlocks() != 1 {
		t.Fatalf("%d free blocks after copy on write, want 1", pool.FreeBlocks())
	}
	// a writes into its (now unshared) block in place.
	if _, err := m.DecodeStep(ctx, []StepSeq{{Cache: a, Tokens: []int32{41}}}); err != nil {
		t.Fatal(err)
	}
	if pool.FreeBlocks() != 1 {
		t.Fatalf("%d free blocks, want 1: an unshared block was copied", pool.FreeBlocks())
	}
	// Needing more blocks than the pool has is an error that leaves the cache as it was.
	c := pool.NewCache()
	long := make([]int32, 40)
	_, err = m.DecodeStep(ctx, []StepSeq{{Cache: c, Tokens: long}})
	if !errors.Is(err, ErrKVPoolFull) || c.Len() != 0 {
		t.Fatalf("overfull pool: %v, cache length %d", err, c.Len())
	}
	for _, x := range []*KVCache[float32]{a, b, c} {
		x.Release()
	}
	if pool.FreeBlocks() != pool.Blocks() {
		t.Fatalf("%d of %d blocks free after releasing every cache", pool.FreeBlocks(), pool.Blocks())
	}
}

// One decode step over sequences of different adapters (and the base model), some
// prefilling and some decoding, gives what each gets alone.
func TestDecodeStepMixesAdaptersAndPhases(t *testing.T) {
	m := tinyModel(t)
	ctx := context.Background()
	var ads []*Adapter
	for i := 0; i < 2; i++ {
		a, err := m.NewAdapter(LoraConfig{Rank: 4 + 4*i, Seed: int64(i), TrainAttn: true, TrainMLP: true, TrainUnembed: i == 1})
		if err != nil {
			t.Fatal(err)
		}
		randomizeAdapter(a, rand.New(rand.NewPCG(uint64(i), 9)))
		ads = append(ads, a)
	}
	pool, err := m.NewKVPool(64)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	prompts := [][]int32{{10, 11, 12, 13, 14}, {200, 201, 202}, {7, 8, 9, 10, 11, 12, 13}}
	lws := []*LoraWeights[float32]{&ads[0].W, &ads[1].W, nil}
	// Alone: each sequence's prompt, then one more token.
	type result struct {
		prompt []float32
		next   []TokenLogprob
	}
	alone := make([]result, 3)
	for i := range prompts {
		c := pool.NewCache()
		o, err := m.DecodeStep(ctx, []StepSeq{{Adapter: lws[i], Cache: c, Tokens: prompts[i], Targets: nextTokens(prompts[i])}})
		if err != nil {
			t.Fatal(err)
		}
		alone[i].prompt = o[0].TargetLogprobs
		o, err = m.DecodeStep(ctx, []StepSeq{{Adapter: lws[i], Cache: c, Tokens: []int32{99}, TopK: 5}})
		if err != nil {
			t.Fatal(err)
		}
		alone[i].next = o[0].TopK[0]
		c.Release()
	}
	// Together: sequence 0 prefilled alone first, then decoding beside 1 and 2 prefilling.
	c0, c1, c2 := pool.NewCache(), pool.NewCache(), pool.NewCache()
	if _, err := m.DecodeStep(ctx, []StepSeq{{Adapter: lws[0], Cache: c0, Tokens: prompts[0]}}); err != nil {
		t.Fatal(err)
	}
	o, err := m.DecodeStep(ctx, []StepSeq{
		{Adapter: lws[0], Cache: c0, Tokens: []int32{99}, TopK: 5},
		{Adapter: lws[1], Cache: c1, Tokens: prompts[1], Targets: nextTokens(prompts[1])},
		{Adapter: lws[2], Cache: c2, Tokens: prompts[2], Targets: nextTokens(prompts[2])},
	})
	if err != nil {
		t.Fatal(err)
	}
	sameTop := func(what string, got, want []TokenLogprob) {
		for j := range want {
			if got[j].Token != want[j].Token || math.Abs(float64(got[j].Logprob-want[j].Logprob)) > 1e-4 {
				t.Fatalf("%s: top-k %v, alone %v", what, got, want)
			}
		}
	}
	sameTop("decode beside prefills", o[0].TopK[0], alone[0].next)
	for i := 1; i < 3; i++ {
		for j, v := range alone[i].prompt {
			g := o[i].TargetLogprobs[j]
			if math.IsNaN(float64(v)) != math.IsNaN(float64(g)) || (!math.IsNaN(float64(v)) && math.Abs(float64(g-v)) > 1e-4) {
				t.Fatalf("sequence %d prompt logprob %d: %v together, %v alone", i, j, g, v)
			}
		}
	}
	// Sequence 1 then decodes from its cache as it would have alone.
	o, err = m.DecodeStep(ctx, []StepSeq{{Adapter: lws[1], Cache: c1, Tokens: []int32{99}, TopK: 5}, {Adapter: lws[2], Cache: c2, Tokens: []int32{99}, TopK: 5}})
	if err != nil {
		t.Fatal(err)
	}
	sameTop("sequence 1 after a shared prefill", o[0].TopK[0], alone[1].next)
	sameTop("sequence 2 after a shared prefill", o[1].TopK[0], alone[2].next)
}

// nextTokens are a prompt's next tokens, -1 after the last.
func nextTokens(p []int32) []int32 { return append(append([]int32(nil), p[1:]...), -1) }

func TestDecodeStepRejectsBadInputByName(t *testing.T) {
	m := tinyModel(t)
	pool, _ := m.NewKVPool(8)
	defer pool.Close()
	other := tinyModel(t)
	otherPool, _ := other.NewKVPool(2)
	defer otherPool.Close()
	c := pool.NewCache()
	cases := []struct {
		name  string
		seqs  []StepSeq
		wants string
	}{
		{"no sequences", nil, "no sequences"},
		{"no cache", []StepSeq{{Tokens: []int32{1}}}, "no KV cache"},
		{"foreign pool", []StepSeq{{Cache: otherPool.NewCache(), Tokens: []int32{1}}}, "not from the step's pool"},
		{"cache twice", []StepSeq{{Cache: c, Tokens: []int32{1}}, {Cache: c, Tokens: []int32{2}}}, "appears twice"},
		{"no tokens", []StepSeq{{Cache: c}}, "no tokens"},
		{"token out of vocabulary", []StepSeq{{Cache: c, Tokens: []int32{1, 512}}}, "outside the vocabulary"},
		{"targets length", []StepSeq{{Cache: c, Tokens: []int32{1, 2}, Targets: []int32{3}}}, "1 targets for 2 tokens"},
		{"bad draw", []StepSeq{{Cache: c, Tokens: []int32{1}, Draws: []Draw{{Temperature: 1, TopP: 1, U: 1}}}}, "uniform"},
		{"too long", []StepSeq{{Cache: c, Tokens: make([]int32, 2049)}}, "more than the model's 2048"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.DecodeStep(context.Background(), tc.seqs)
			var ie *InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("error %v, want an InputError naming %q", err, tc.wants)
			}
			if c.Len() != 0 || pool.FreeBlocks() != pool.Blocks() {
				t.Fatal("a rejected step changed the cache")
			}
		})
	}
}

func TestValidateSampleAndAdamParams(t *testing.T) {
	c := smallConfig("llama", false)
	good := SampleRequest{Prompt: []int32{1, 2}, NumSamples: 2, Params: SampleParams{MaxTokens: 4, Temperature: 1, TopK: -1, TopP: 1}}
	if err := ValidateSample(c, good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mut   func(*SampleRequest)
		wants string
	}{
		{func(r *SampleRequest) { r.Prompt = nil }, "prompt is empty"},
		{func(r *SampleRequest) { r.NumSamples = 0 }, "num_samples"},
		{func(r *SampleRequest) { r.Params.MaxTokens = 0 }, "max_tokens"},
		{func(r *SampleRequest) { r.Params.Temperature = math.NaN() }, "temperature"},
		{func(r *SampleRequest) { r.Params.Temperature = math.Inf(1) }, "temperature"},
		{func(r *SampleRequest) { r.Params.TopP = 0 }, "top_p"},
		{func(r *SampleRequest) { r.Params.TopK = -2 }, "top_k"},
		{func(r *SampleRequest) { r.TopKPromptLogprobs = 101 }, "topk_prompt_logprobs"},
		{func(r *SampleRequest) { r.Params.MaxTokens = 63 }, "exceeds the model's 64 positions"},
		{func(r *SampleRequest) { r.Prompt = []int32{64} }, "prompt token 64"},
		{func(r *SampleRequest) { r.Params.StopTokens = []int32{-1} }, "stop token -1"},
	} {
		r := good
		r.Params.StopTokens = nil
		tc.mut(&r)
		err := ValidateSample(c, r)
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.wants) {
			t.Errorf("%+v: error %v, want an InputError naming %q", r, err, tc.wants)
		}
	}
	ok := AdamParams{LearningRate: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p     AdamParams
		wants string
	}{
		{AdamParams{LearningRate: -1, Beta1: 0.9, Beta2: 0.9, Eps: 1e-8}, "learning_rate"},
		{AdamParams{LearningRate: math.Inf(1), Beta1: 0.9, Beta2: 0.9, Eps: 1e-8}, "learning_rate"},
		{AdamParams{Beta1: 1, Beta2: 0.9, Eps: 1e-8}, "beta1"},
		{AdamParams{Beta1: 0.9, Beta2: math.NaN(), Eps: 1e-8}, "beta2"},
		{AdamParams{Beta1: 0.9, Beta2: 0.9}, "eps"},
		{AdamParams{Beta1: 0.9, Beta2: 0.9, Eps: 1e-8, WeightDecay: -1}, "weight_decay"},
		{AdamParams{Beta1: 0.9, Beta2: 0.9, Eps: 1e-8, GradClipNorm: math.NaN()}, "grad_clip_norm"},
	} {
		err := tc.p.Validate()
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.wants) {
			t.Errorf("%+v: error %v, want an InputError naming %q", tc.p, err, tc.wants)
		}
	}
}

// Every phase a sample request opens is closed, also when the request fails.
func TestSampleHooksPairUpOnErrors(t *testing.T) {
	m := tinyModel(t)
	for _, tc := range []struct {
		name string
		ctx  func() context.Context
		req  SampleRequest
	}{
		{"invalid", context.Background, SampleRequest{NumSamples: 1}},
		{"cancelled", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, SampleRequest{Prompt: []int32{1, 2}, NumSamples: 1, Params: SampleParams{MaxTokens: 3, TopK: -1, TopP: 1}}},
		{"ok", context.Background, SampleRequest{Prompt: []int32{1, 2}, NumSamples: 2, Params: SampleParams{MaxTokens: 3, TopK: -1, TopP: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open := map[string]int{}
			var order []string
			_, err := m.SampleWithHooks(tc.ctx(), nil, tc.req, SampleHooks{OnPhase: func(p string, start bool) {
				if start {
					open[p]++
					order = append(order, p)
				} else {
					open[p]--
				}
			}})
			if (err == nil) != (tc.name == "ok") {
				t.Fatalf("error %v", err)
			}
			for p, n := range open {
				if n != 0 {
					t.Fatalf("phase %s left open (%d) in %v", p, n, order)
				}
			}
			if tc.name == "ok" && strings.Join(order, ",") != "preprocess,prefill,decode,postprocess" {
				t.Fatalf("phases %v", order)
			}
		})
	}
}

// Targets of -1 skip those rows' logits; the rows that have targets get the same
// log-probabilities as when every row has one (prompt logprobs of the last n tokens).
func TestDecodeStepPartialTargets(t *testing.T) {
	m := tinyModel(t)
	pool, _ := m.NewKVPool(8)
	defer pool.Close()
	prompt := []int32{5, 6, 7, 8, 9, 10}
	all, err := m.DecodeStep(context.Background(), []StepSeq{{Cache: pool.NewCache(), Tokens: prompt, Targets: nextTokens(prompt)}})
	if err != nil {
		t.Fatal(err)
	}
	last2 := []int32{-1, -1, -1, 9, 10, -1}
	some, err := m.DecodeStep(context.Background(), []StepSeq{{Cache: pool.NewCache(), Tokens: prompt, Targets: last2}})
	if err != nil {
		t.Fatal(err)
	}
	for j, tg := range last2 {
		got, want := some[0].TargetLogprobs[j], all[0].TargetLogprobs[j]
		if tg < 0 {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("row %d without a target has logprob %v", j, got)
			}
			continue
		}
		if math.Abs(float64(got-want)) > 1e-5 {
			t.Fatalf("row %d: %v with some targets, %v with all", j, got, want)
		}
	}
}
