package sched

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tuft-go/tuft/engine"
)

// This file is the planning half of the scheduler: which sequences the next step runs,
// and the KV-cache admission, preemption and reclaiming behind that choice.

// plan chooses the units of the next decode step and their token counts: sequences that
// are decoding take one token, prompts (and preempted sequences being recomputed) a
// chunk. Tenants take turns by deficit round robin, a token per round, until the step's
// token or sequence budget is spent; each tenant's running
// sequences come first (rotating, so all of them advance), then its waiting ones in
// order, KV-admitted only when their memory fits.
func (s *Scheduler) plan() []planned {
	n := len(s.ring)
	if n == 0 {
		return nil
	}
	cfg := s.cfg
	tokLeft, seqLeft := cfg.StepTokens, cfg.MaxBatchSeqs
	m := memPlan{s: s}
	// Blocks that admitted work will still take (the rest of its prompts): KV admission
	// leaves them free.
	running := 0
	for _, t := range s.ring {
		for _, u := range t.running {
			m.promised += u.cache.BlocksToAppend(len(u.feed))
		}
		running += len(t.running)
	}
	step := s.stepCount()
	var plan []planned
	at := map[*unit]int{}
	cands := make([][]*unit, n)
	for i, t := range s.ring {
		k := len(t.running)
		off := 0
		if k > 0 {
			off = int(step % int64(k))
		}
		c := make([]*unit, 0, k+len(t.pending))
		c = append(c, t.running[off:]...)
		c = append(c, t.running[:off]...)
		cands[i] = append(c, t.pending...)
	}
	cur := make([]int, n)
	exhausted := make([]bool, n)
	start := s.rr % n
	s.rr++
	// One token per tenant per round: rows go round the tenants one at a time, so a full
	// step is shared equally (max-min fair) however many sequences each tenant has.
	const quantum = 1
	for tokLeft > 0 {
		progress := false
		for k := 0; k < n && tokLeft > 0; k++ {
			ti := (start + k) % n
			if exhausted[ti] {
				continue
			}
			t := s.ring[ti]
			t.deficit += quantum
			for t.deficit > 0 && tokLeft > 0 {
				if cur[ti] >= len(cands[ti]) {
					exhausted[ti], t.deficit = true, 0
					break
				}
				u := cands[ti][cur[ti]]
				if u.gone {
					cur[ti]++
					continue
				}
				pi, inPlan := at[u]
				have, prior := 0, 0
				if inPlan {
					have, prior = plan[pi].n, plan[pi].need
				} else {
					if seqLeft == 0 {
						exhausted[ti] = true
						break
					}
					if u.cache == nil {
						if u.admitted != 0 && u.preemptedAt == step {
							cur[ti]++ // preempted for this step's memory
							continue
						}
						if !s.admitKV(u, &m, running) {
							exhausted[ti] = true // its line waits for memory, in order
							break
						}
						running++
					}
				}
				room := min(len(u.feed), cfg.PrefillChunk) - have
				if room <= 0 {
					cur[ti]++
					continue
				}
				take := min(room, t.deficit, tokLeft)
				need := u.cache.BlocksToAppend(have+take) - prior
				if need > m.free() {
					s.reclaim(need-m.free(), at, u)
					if need > m.free() {
						if !inPlan && running > 1 {
							s.preempt(u) // it cannot grow now; the others can
							running--
						}
						cur[ti]++
						continue
					}
				}
				m.reserved += need
				m.promised = max(0, m.promised-need)
				if inPlan {
					plan[pi].n += take
					plan[pi].need += need
				} else {
					at[u] = len(plan)
					plan = append(plan, planned{u: u, n: take, need: need})
					seqLeft--
				}
				t.deficit -= take
				tokLeft -= take
				progress = true
				if take == room {
					cur[ti]++
				}
			}
		}
		if !progress {
			break
		}
	}
	return plan
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
