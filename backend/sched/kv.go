package sched

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tuft-go/tuft/engine"
)

// This file is the scheduler's KV manager: the model's block pool, the memory side of
// planning a decode step (the tenant policy's oracle), KV admission, reclaiming and
// preemption. The prefix cache it evicts from is prefix.go.

// plan chooses the units of the next decode step and their token counts: sequences that
// are decoding take one token, prompts (and preempted sequences being recomputed) a
// chunk. The tenant policy (fillStep, policy.go) shares the step's token budget; each
// tenant's running sequences come first (rotating, so all of them advance), then its
// waiting ones in order, KV-admitted only when their memory fits (stepPlanner.offer).
func (s *Scheduler) plan() []planned {
	n := len(s.ring)
	if n == 0 {
		return nil
	}
	p := &stepPlanner{s: s, m: memPlan{s: s}, seqLeft: s.cfg.MaxBatchSeqs, at: map[*unit]int{}, step: s.stepCount()}
	// Blocks that admitted work will still take (the rest of its prompts): KV admission
	// leaves them free.
	for _, t := range s.ring {
		for _, u := range t.running {
			p.m.promised += u.cache.BlocksToAppend(len(u.feed))
		}
		p.running += len(t.running)
	}
	p.cands = make([][]*unit, n)
	counts := make([]int, n)
	deficit := make([]int, n)
	for i, t := range s.ring {
		k := len(t.running)
		off := 0
		if k > 0 {
			off = int(p.step % int64(k))
		}
		c := make([]*unit, 0, k+len(t.pending))
		c = append(c, t.running[off:]...)
		c = append(c, t.running[:off]...)
		p.cands[i] = append(c, t.pending...)
		counts[i] = len(p.cands[i])
		deficit[i] = t.deficit
	}
	start := s.rr % n
	s.rr++
	fillStep(deficit, counts, start, s.cfg.StepTokens, p)
	for i, t := range s.ring {
		t.deficit = deficit[i]
	}
	return p.plan
}

// stepPlanner is the KV manager's side of planning a decode step: the policy's oracle.
// It admits waiting units, reserves the blocks of each chunk it grants, and reclaims or
// preempts when a chunk does not fit.
type stepPlanner struct {
	s       *Scheduler
	m       memPlan
	cands   [][]*unit
	plan    []planned
	at      map[*unit]int // unit → its index in plan
	seqLeft int
	running int // units holding a cache
	step    int64
}

func (p *stepPlanner) offer(ti, ci, most int) offer {
	s, u := p.s, p.cands[ti][ci]
	if u.gone {
		return offer{}
	}
	pi, inPlan := p.at[u]
	have, prior := 0, 0
	if inPlan {
		have, prior = p.plan[pi].n, p.plan[pi].need
	} else {
		if p.seqLeft == 0 {
			return offer{block: true}
		}
		if u.cache == nil {
			if u.admitted != 0 && u.preemptedAt == p.step {
				return offer{} // preempted for this step's memory
			}
			if !s.admitKV(u, &p.m, p.running) {
				return offer{block: true} // its line waits for memory, in order
			}
			p.running++
		}
	}
	room := min(len(u.feed), s.cfg.PrefillChunk) - have
	if room <= 0 {
		return offer{}
	}
	take := min(room, most)
	need := u.cache.BlocksToAppend(have+take) - prior
	if need > p.m.free() {
		s.reclaim(need-p.m.free(), p.at, u)
		if need > p.m.free() {
			if !inPlan && p.running > 1 {
				s.preempt(u) // it cannot grow now; the others can
				p.running--
			}
			return offer{}
		}
	}
	p.m.reserved += need
	p.m.promised = max(0, p.m.promised-need)
	if inPlan {
		p.plan[pi].n += take
		p.plan[pi].need += need
	} else {
		p.at[u] = len(p.plan)
		p.plan = append(p.plan, planned{u: u, n: take, need: need})
		p.seqLeft--
	}
	return offer{took: take, stay: take < room}
}

// ensurePool creates the model's KV pool (once) and its prefix cache.
func (s *Scheduler) ensurePool() error {
	if s.pool != nil {
		return nil
	}
	p, err := s.m.NewKVPool(s.blocks)
	if err != nil {
		return fmt.Errorf("KV cache of %d blocks (engine.scheduler.kv_cache_bytes %d): %w", s.blocks, s.cfg.KVCacheBytes, err)
	}
	s.mu.Lock()
	s.pool = p
	if s.cfg.PrefixCacheEntries > 0 {
		s.prefix = newPrefixCache(engine.KVBlockLen, s.cfg.PrefixCacheEntries)
	}
	s.mu.Unlock()
	return nil
}

// memPlan is the pool's memory as a step is planned: blocks the planned chunks will
// take (reserved), and blocks admitted work will take later (promised).
type memPlan struct {
	s                  *Scheduler
	reserved, promised int
}

func (m *memPlan) free() int { return m.s.pool.FreeBlocks() - m.reserved }

// admitKV is KV admission (see the glossary in docs/architecture.md): it gives a
// waiting unit its cache (a prefix from the prefix cache where one matches) if its
// remaining tokens, and some room to grow, fit beside what admitted work still needs;
// cached prefixes are evicted to make room (prefixCache.victim: the largest holder's
// least recently used first).
func (s *Scheduler) admitKV(u *unit, m *memPlan, running int) bool {
	r := u.r
	var c *engine.KVCache[float32]
	hit := 0
	// A prompt's outputs need their positions computed: prompt logprobs need them all, so
	// no prefix; target logprobs and alternative tokens need those from the first they
	// name (plan.FirstPos), so a prefix up to there.
	limit := len(u.feed) - 1
	if u.idx < 0 {
		if r.req.PromptLogprobs || r.req.TopKPromptLogprobs > 0 {
			limit = 0
		}
		limit = min(limit, r.gen.Plan().FirstPos())
	}
	if s.prefix != nil && limit > 0 {
		c, hit = s.prefix.lookup(r.tenant, r.key, u.feed, limit)
	}
	if c == nil {
		c = s.pool.NewCache()
	}
	rest := c.BlocksToAppend(len(u.feed) - hit)
	headroom := 1
	if u.idx < 0 {
		// The samples' first writes copy the prompt's last block.
		headroom = min(r.gen.Samples(), max(1, s.blocks/8))
	}
	watermark := max(1, s.blocks/64)
	fits := func() bool { return m.free()-m.promised >= rest+headroom+watermark }
	for !fits() && s.prefix != nil && s.prefix.evict() {
	}
	// With nothing else running, a unit that fits at all runs (progress).
	if !fits() && !(running == 0 && m.free() >= rest) {
		c.Release()
		return false
	}
	u.cache = c
	u.feed = u.feed[hit:]
	m.promised += rest
	s.admits++
	u.admitted = s.admits
	t := u.t
	if i := slices.Index(t.pending, u); i >= 0 {
		t.pending = slices.Delete(t.pending, i, i+1)
	}
	t.running = append(t.running, u)
	if u.idx < 0 {
		r.gen.SetPromptCacheHit(hit)
		s.stats.prefixHitTokens.Add(int64(hit))
		if r.started.IsZero() {
			r.started = time.Now()
			if r.hooks.Phase != nil {
				r.hooks.Phase("prefill")
			}
		}
	}
	return true
}

// reclaim tries to free need blocks: it evicts cached prefixes (the largest holder's
// least recently used first), then preempts running units that are not in the step being planned, from the
// tenant that holds the most positions, latest admitted first.
func (s *Scheduler) reclaim(need int, inPlan map[*unit]int, self *unit) {
	before := s.pool.FreeBlocks()
	for s.pool.FreeBlocks()-before < need && s.prefix != nil && s.prefix.evict() {
	}
	for s.pool.FreeBlocks()-before < need {
		var victim *unit
		most := -1
		for _, t := range s.ring {
			held := 0
			var latest *unit
			for _, u := range t.running {
				held += u.cache.Len()
				if _, ok := inPlan[u]; !ok && u != self && (latest == nil || u.admitted > latest.admitted) {
					latest = u
				}
			}
			if latest != nil && held > most {
				most, victim = held, latest
			}
		}
		if victim == nil {
			return
		}
		s.preempt(victim)
	}
}

// PrefixKey names an adapter's weights in the prefix cache: the adapter and the
// generation of its weights (cached keys and values are only valid for those weights).
func PrefixKey(lora string, gen uint64) string { return fmt.Sprintf("%s\x00%d", lora, gen) }

// adapterOfKey is the adapter a prefix key belongs to.
func adapterOfKey(key string) string {
	a, _, _ := strings.Cut(key, "\x00")
	return a
}

// preempt gives a running unit's memory back to the pool; it waits (first in its
// tenant's line) to be recomputed from its tokens when memory frees up. Its generator
// and pending draw are kept, so its output is the same as if it had never left.
func (s *Scheduler) preempt(u *unit) {
	t, r := u.t, u.r
	u.cache.Release()
	u.cache = nil
	if u.idx < 0 {
		u.feed = r.req.Prompt
	} else {
		u.feed = append(append([]int32(nil), r.req.Prompt...), r.gen.Tokens(u.idx)...)
	}
	u.preemptedAt = s.stepCount()
	if i := slices.Index(t.running, u); i >= 0 {
		t.running = slices.Delete(t.running, i, i+1)
	}
	t.pending = slices.Insert(t.pending, 0, u)
	r.preempts++
	s.stats.preemptions.Add(1)
}
