package sched

import (
	"container/list"
	"context"
	"testing"
)

// A cached prompt serves only the tenant whose request made it: another tenant sending
// the same prompt to the same adapter (a base model, or a published adapter several
// tenants sample) computes it again and sees no cache-hit tokens, while the first
// tenant's own repeat still hits (issue 22).
func TestPrefixCacheIsPerTenant(t *testing.T) {
	l, m := schedLocal(t, Config{PrefixCacheEntries: 16})
	lw := addAdapter(t, l, "published", 4)
	alice, bob := WithTenant(context.Background(), "alice"), WithTenant(context.Background(), "bob")
	for _, lora := range []string{"", "published"} {
		p := prompt(40, 3) // two whole blocks and 8 tokens
		if r, err := l.Sample(alice, "tiny", lora, seeded(p, 1, 3, 1, 1)); err != nil || r.PromptCacheHitTokens != 0 {
			t.Fatalf("%q: alice's first request: %d cache-hit tokens, %v", lora, r.PromptCacheHitTokens, err)
		}
		req := seeded(p, 2, 4, 0.8, 2)
		r, err := l.Sample(bob, "tiny", lora, req)
		if err != nil {
			t.Fatal(err)
		}
		if r.PromptCacheHitTokens != 0 {
			t.Fatalf("%q: bob's request hit %d tokens of alice's prompt", lora, r.PromptCacheHitTokens)
		}
		if lora != "" {
			sameAsAlone(t, "bob", m, lw, req, r)
		}
		for _, who := range []context.Context{alice, bob} {
			if r, _ := l.Sample(who, "tiny", lora, seeded(p, 1, 3, 1, 1)); r.PromptCacheHitTokens != 32 {
				t.Fatalf("%q: %s's own repeat: %d cache-hit tokens, want 32", lora, TenantFrom(who), r.PromptCacheHitTokens)
			}
		}
	}
}

// A tenant flooding distinct prompts evicts its own entries once the cache is full, not
// another tenant's that holds no more than its share (capacity / tenants holding entries).
func TestPrefixCacheFloodKeepsAnotherTenantsShare(t *testing.T) {
	l, _ := schedLocal(t, Config{PrefixCacheEntries: 6})
	victim, flood := WithTenant(context.Background(), "victim"), WithTenant(context.Background(), "flood")
	mine := [][]int32{prompt(33, 50), prompt(33, 51), prompt(33, 52)} // three entries: the victim's share of 6 between 2
	for _, p := range mine {
		if _, err := l.Sample(victim, "tiny", "", seeded(p, 1, 2, 0, 1)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 40; i++ {
		if _, err := l.Sample(flood, "tiny", "", seeded(prompt(33, 100+i), 1, 2, 0, 1)); err != nil {
			t.Fatal(err)
		}
	}
	pc := l.s.prefix
	if got := pc.held("victim"); got != 3 {
		t.Fatalf("the victim holds %d entries after the flood, want its 3", got)
	}
	if got := pc.held("flood"); got != 3 {
		t.Fatalf("the flood holds %d entries, want the other 3", got)
	}
	for _, p := range mine {
		if r, _ := l.Sample(victim, "tiny", "", seeded(p, 1, 2, 0, 1)); r.PromptCacheHitTokens != 32 {
			t.Fatalf("the victim's entry after the flood: %d cache-hit tokens, want 32", r.PromptCacheHitTokens)
		}
	}
	// Above its share, the victim loses entries too (its least recently used first): a
	// fourth prompt leaves it three.
	if _, err := l.Sample(victim, "tiny", "", seeded(prompt(33, 53), 1, 2, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if v, f := pc.held("victim"), pc.held("flood"); v != 3 || f != 3 {
		t.Fatalf("victim %d, flood %d entries, want 3 and 3", v, f)
	}
}

// Under memory pressure the victim is the least recently used entry of the tenant whose
// entries hold the most blocks, whoever holds the most entries; between tenants holding
// as much, the older entry goes.
func TestPrefixVictimByBlocks(t *testing.T) {
	p := newPrefixCache(16, 100)
	add := func(tenant string, blocks int) *prefixEntry {
		tp := p.tenants[tenant]
		if tp == nil {
			tp = &tenantPrefixes{lru: list.New()}
			p.tenants[tenant] = tp
		}
		e := &prefixEntry{tenant: tenant, toks: make([]int32, 16*blocks)}
		e.el = tp.lru.PushFront(e)
		tp.blocks += blocks
		p.n++
		p.touch(e)
		return e
	}
	bigOld := add("big", 50) // one entry of 50 blocks
	add("big", 1)
	manyOld := add("many", 1) // five entries of 1 block
	for range 4 {
		add("many", 1)
	}
	if v := p.victim(true); v != bigOld {
		t.Fatalf("by blocks: evicted %s's entry of %d tokens, want big's oldest", v.tenant, len(v.toks))
	}
	if v := p.victim(false); v != manyOld {
		t.Fatalf("by entries: evicted %s's entry, want many's oldest", v.tenant)
	}
	tie := add("tie", 1) // five entries too, all newer than many's
	for range 4 {
		add("tie", 1)
	}
	if v := p.victim(false); v != manyOld {
		t.Fatalf("a tie in entries: evicted %s's, want the older entry (many's)", v.tenant)
	}
	var many []*prefixEntry
	for el := p.tenants["many"].lru.Front(); el != nil; el = el.Next() {
		many = append(many, el.Value.(*prefixEntry))
	}
	for _, e := range many { // every one of many's entries used again: tie's are older now
		p.touch(e)
	}
	if v := p.victim(false); v != tie {
		t.Fatalf("a tie in entries after many's were used: evicted %s's, want tie's oldest", v.tenant)
	}
}
