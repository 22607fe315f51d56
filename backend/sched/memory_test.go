package sched

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine"
)

// A prompt that starts with the same whole blocks as an earlier one of the same adapter
// is served from the prefix cache (and samples what it samples without it); another
// adapter, changed weights, or prompt logprobs get no hit; entries beyond the cap are
// evicted least recently used first.
func TestPrefixCacheHitsAndEviction(t *testing.T) {
	l, m := schedLocal(t, Config{PrefixCacheEntries: 2})
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
	pc := l.s.prefix
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
	for _, tp := range pc.tenants {
		for el := tp.lru.Front(); el != nil; el = el.Next() {
			if adapterOfKey(el.Value.(*prefixEntry).key) == "b" {
				t.Fatal("a removed adapter's prompts stay cached")
			}
		}
	}
}

// With a KV cache far smaller than the demand, every request still completes with the
// tokens it samples alone: work waits for memory and running sequences are preempted and
// recomputed; cached prefixes are evicted under pressure; a request that can never fit
// is refused naming the key; everything is given back at the end.
func TestMemoryBudgetAdmitsAndPreempts(t *testing.T) {
	// Ten 16-position blocks of the tiny model (64 KiB each).
	l, m := schedLocal(t, Config{KVCacheBytes: 10 << 16, PrefixCacheEntries: 4, StepTokens: 64, PrefillChunk: 32})
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
	s := l.s
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
