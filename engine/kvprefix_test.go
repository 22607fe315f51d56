package engine

import (
	"context"
	"errors"
	"math"
	"testing"
)

// A prefix fork continues exactly like the cache it came from, BlocksToAppend predicts
// what a step takes, and a step that failed on a full pool leaves no block that two
// caches would both write into.
func TestKVCacheForkPrefixAndBlockPlanning(t *testing.T) {
	m := tinyModel(t)
	ctx := context.Background()
	pool, err := m.NewKVPool(8)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	prompt := make([]int32, 37)
	for i := range prompt {
		prompt[i] = int32(20 + i)
	}
	full := pool.NewCache()
	if got := full.BlocksToAppend(len(prompt)); got != 3 {
		t.Fatalf("BlocksToAppend(37) on an empty cache = %d, want 3", got)
	}
	if _, err := m.DecodeStep(ctx, []StepSeq{{Cache: full, Tokens: prompt}}); err != nil {
		t.Fatal(err)
	}
	// A fork of the first two blocks, continued with the rest of the prompt, gives the same
	// next-token distribution as the full prefill.
	pre := full.ForkPrefix(32)
	if pre.Len() != 32 || pre.Blocks() != 2 || pool.FreeBlocks() != 5 {
		t.Fatalf("prefix fork: len %d, %d blocks, %d free", pre.Len(), pre.Blocks(), pool.FreeBlocks())
	}
	if got := pre.BlocksToAppend(5); got != 1 {
		t.Fatalf("BlocksToAppend(5) after a whole-block prefix = %d, want 1", got)
	}
	o1, err := m.DecodeStep(ctx, []StepSeq{{Cache: pre, Tokens: prompt[32:], TopK: 3}})
	if err != nil {
		t.Fatal(err)
	}
	o2, err := m.DecodeStep(ctx, []StepSeq{{Cache: full, Tokens: []int32{99}, TopK: 3}})
	if err != nil {
		t.Fatal(err)
	}
	_ = o2
	ref := pool.NewCache()
	o3, err := m.DecodeStep(ctx, []StepSeq{{Cache: ref, Tokens: prompt, TopK: 3}})
	if err != nil {
		t.Fatal(err)
	}
	last := o1[0].TopK[len(o1[0].TopK)-1]
	want := o3[0].TopK[len(o3[0].TopK)-1]
	for j := range want {
		if last[j].Token != want[j].Token || math.Abs(float64(last[j].Logprob-want[j].Logprob)) > 1e-4 {
			t.Fatalf("prefix-forked continuation %v, full prefill %v", last, want)
		}
	}
	// A fork sharing a partly filled block needs a copy to write.
	f := full.Fork()
	if got := f.BlocksToAppend(1); got != 1 {
		t.Fatalf("BlocksToAppend(1) into a shared partial block = %d, want 1 (the copy)", got)
	}
	for _, c := range []*KVCache[float32]{pre, ref, f} {
		c.Release()
	}
	// Fill the pool, then fail a step: the first sequence keeps a fresh block it reserved.
	a, b := pool.NewCache(), pool.NewCache()
	if _, err := m.DecodeStep(ctx, []StepSeq{{Cache: a, Tokens: prompt[:16]}}); err != nil {
		t.Fatal(err)
	}
	free := pool.FreeBlocks()
	long := make([]int32, 16*free)
	_, err = m.DecodeStep(ctx, []StepSeq{{Cache: a, Tokens: []int32{5}}, {Cache: b, Tokens: long}})
	if !errors.Is(err, ErrKVPoolFull) || a.Len() != 16 {
		t.Fatalf("overfull step: %v, len %d", err, a.Len())
	}
	// A fork now must not share the reserved block, or both would write position 16 there.
	af := a.Fork()
	if af.Blocks() != 1 {
		t.Fatalf("fork shares %d blocks, want only the one holding positions", af.Blocks())
	}
	b.Release()
	oa, err := m.DecodeStep(ctx, []StepSeq{{Cache: a, Tokens: []int32{7}, TopK: 2}, {Cache: af, Tokens: []int32{300}, TopK: 2}})
	if err != nil {
		t.Fatal(err)
	}
	ob, err := m.DecodeStep(ctx, []StepSeq{{Cache: a, Tokens: []int32{8}, TopK: 2}})
	if err != nil {
		t.Fatal(err)
	}
	c := pool.NewCache()
	oc, err := m.DecodeStep(ctx, []StepSeq{{Cache: c, Tokens: append(append([]int32(nil), prompt[:16]...), 7, 8), TopK: 2}})
	if err != nil {
		t.Fatal(err)
	}
	_ = oa
	if g, w := ob[0].TopK[0][0], oc[0].TopK[17][0]; g.Token != w.Token || math.Abs(float64(g.Logprob-w.Logprob)) > 1e-4 {
		t.Fatalf("after the fork wrote its own token, the original continues with %v, a fresh prefill gives %v", g, w)
	}
	for _, x := range []*KVCache[float32]{a, af, c, full} {
		x.Release()
	}
	if pool.FreeBlocks() != pool.Blocks() {
		t.Fatalf("%d of %d blocks free after releasing everything", pool.FreeBlocks(), pool.Blocks())
	}
}

// A released cache's blocks come back in the order it held them, so the next cache of as
// many positions holds them in order again (read in place by decode attention).
func TestKVCacheReleaseKeepsBlockOrder(t *testing.T) {
	m := tinyModel(t)
	pool, err := m.NewKVPool(8)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for round := 0; round < 3; round++ {
		c := pool.NewCache()
		if _, err := c.reserve(5 * pool.BlockLen()); err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(c.blocks); i++ {
			if c.blocks[i] != c.blocks[i-1]+1 {
				t.Fatalf("round %d: blocks %v are not in order", round, c.blocks)
			}
		}
		c.Release()
	}
}
