package sched

import (
	"container/list"
	"encoding/binary"
	"hash/fnv"
	"slices"
	"sync"

	"github.com/tuft-go/tuft/engine"
)

// prefixCache keeps the KV blocks of recent prompts, per tenant and adapter, so that a
// request whose prompt starts with the same whole blocks of tokens as an earlier one's
// of the same tenant (a shared system prompt, the same question sampled again) skips
// computing them. Entries are found by a chain hash over whole blocks (block d's hash
// covers blocks 0…d), checked token by token, reference-counted through the pool (an
// entry shares its blocks with the caches forked from it).
//
// Entries belong to the tenant whose request made them and serve only that tenant's
// requests: the key is (reader tenant, adapter and weights generation, tokens), also
// for a published adapter that several tenants sample. A hit is visible to the client
// (prompt_cache_hit_tokens, and a reply many times faster), so a cache shared across
// tenants told one tenant whether another had sent a given prompt, and let a secret in
// a known template be guessed block by block (issue 22).
//
// Eviction shares the cache between tenants: when it holds too many entries, or the pool
// needs memory, the least recently used entry of the tenant holding the most (entries,
// or cached blocks under memory pressure) goes first. A tenant at or below an equal
// share (capacity / tenants holding entries) therefore loses entries only once every
// tenant is at or below its share: one tenant's flood of distinct prompts evicts its
// own entries, not another's. Safe for concurrent use.
type prefixCache struct {
	blockLen   int
	maxEntries int

	mu      sync.Mutex
	index   map[uint64][]*prefixEntry // chain hash of the first d blocks → entries that hold them
	tenants map[string]*tenantPrefixes
	n       int    // entries, all tenants
	clock   uint64 // use counter: orders entries of different tenants by recency
}

// tenantPrefixes are one tenant's entries.
type tenantPrefixes struct {
	lru    *list.List // of *prefixEntry, most recently used first
	blocks int        // whole blocks its entries hold
}

type prefixEntry struct {
	tenant string
	key    string  // the adapter (and its weights' generation)
	toks   []int32 // whole blocks
	hashes []uint64
	cache  *engine.KVCache[float32] // exactly len(toks) positions
	el     *list.Element
	used   uint64 // clock at the last use
}

func newPrefixCache(blockLen, maxEntries int) *prefixCache {
	return &prefixCache{blockLen: blockLen, maxEntries: maxEntries, index: map[uint64][]*prefixEntry{}, tenants: map[string]*tenantPrefixes{}}
}

// chain returns the chain hashes of toks' first whole blocks, at most blocks of them,
// in the namespace of tenant and key.
func (p *prefixCache) chain(tenant, key string, toks []int32, blocks int) []uint64 {
	h := fnv.New64a()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], uint32(len(tenant)))
	h.Write(b[:]) // the length first: ("ab", "c") and ("a", "bc") differ
	h.Write([]byte(tenant))
	h.Write([]byte(key))
	out := make([]uint64, 0, blocks)
	for d := 0; d < blocks; d++ {
		for _, t := range toks[d*p.blockLen : (d+1)*p.blockLen] {
			binary.LittleEndian.PutUint32(b[:], uint32(t))
			h.Write(b[:])
		}
		out = append(out, h.Sum64())
	}
	return out
}

// lookup finds the longest cached prefix of toks for tenant and key, at most limit
// tokens, and returns a cache holding it (a fork the caller owns) and its length; nil, 0
// on a miss.
func (p *prefixCache) lookup(tenant, key string, toks []int32, limit int) (*engine.KVCache[float32], int) {
	blocks := min(limit, len(toks)) / p.blockLen
	if blocks == 0 {
		return nil, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e, d := p.find(tenant, key, toks, p.chain(tenant, key, toks, blocks))
	if e == nil {
		return nil, 0
	}
	p.touch(e)
	n := d * p.blockLen
	return e.cache.ForkPrefix(n), n
}

// touch marks e most recently used. Callers hold p.mu.
func (p *prefixCache) touch(e *prefixEntry) {
	p.clock++
	e.used = p.clock
	p.tenants[e.tenant].lru.MoveToFront(e.el)
}

// find returns the entry holding the most of toks' leading blocks (with their chain
// hashes hs) and how many. Callers hold p.mu.
func (p *prefixCache) find(tenant, key string, toks []int32, hs []uint64) (*prefixEntry, int) {
	var best *prefixEntry
	depth := 0
	bl := p.blockLen
	for d := 1; d <= len(hs); d++ {
		blk := toks[(d-1)*bl : d*bl]
		if best != nil && len(best.toks) >= d*bl && slices.Equal(best.toks[(d-1)*bl:d*bl], blk) {
			depth = d
			continue
		}
		found := false
		for _, e := range p.index[hs[d-1]] {
			if e.tenant == tenant && e.key == key && len(e.toks) >= d*bl && slices.Equal(e.toks[:d*bl], toks[:d*bl]) {
				best, depth, found = e, d, true
				break
			}
		}
		if !found {
			break
		}
	}
	return best, depth
}

// insert remembers the whole blocks of toks, whose keys and values c holds, for tenant
// and key (c keeps its own reference; the entry takes a fork).
func (p *prefixCache) insert(tenant, key string, toks []int32, c *engine.KVCache[float32]) {
	blocks := min(len(toks), c.Len()) / p.blockLen
	if blocks == 0 || p.maxEntries <= 0 {
		return
	}
	n := blocks * p.blockLen
	p.mu.Lock()
	defer p.mu.Unlock()
	hs := p.chain(tenant, key, toks, blocks)
	old, d := p.find(tenant, key, toks, hs)
	if old != nil && d == blocks {
		p.touch(old)
		return
	}
	e := &prefixEntry{tenant: tenant, key: key, toks: append([]int32(nil), toks[:n]...), hashes: hs, cache: c.ForkPrefix(n)}
	tp := p.tenants[tenant]
	if tp == nil {
		tp = &tenantPrefixes{lru: list.New()}
		p.tenants[tenant] = tp
	}
	e.el = tp.lru.PushFront(e)
	tp.blocks += blocks
	p.n++
	p.touch(e)
	for _, h := range hs {
		p.index[h] = append(p.index[h], e)
	}
	// An entry the new one extends holds nothing the new one does not.
	if old != nil && len(old.toks) == d*p.blockLen {
		p.remove(old)
	}
	for p.n > p.maxEntries {
		p.remove(p.victim(false))
	}
}

// victim is the entry to evict: the least recently used of the tenant that holds the
// most entries (byBlocks: the most cached blocks), the older one between tenants that
// hold as many. Callers hold p.mu; the cache is not empty.
func (p *prefixCache) victim(byBlocks bool) *prefixEntry {
	var best *prefixEntry
	most := -1
	for _, tp := range p.tenants {
		held := tp.lru.Len()
		if byBlocks {
			held = tp.blocks
		}
		e := tp.lru.Back().Value.(*prefixEntry)
		if held > most || (held == most && e.used < best.used) {
			best, most = e, held
		}
	}
	return best
}

// remove drops an entry and releases its blocks. Callers hold p.mu.
func (p *prefixCache) remove(e *prefixEntry) {
	tp := p.tenants[e.tenant]
	tp.lru.Remove(e.el)
	tp.blocks -= len(e.toks) / p.blockLen
	if tp.lru.Len() == 0 {
		delete(p.tenants, e.tenant)
	}
	p.n--
	for _, h := range e.hashes {
		l := p.index[h]
		if i := slices.Index(l, e); i >= 0 {
			l = slices.Delete(l, i, i+1)
		}
		if len(l) == 0 {
			delete(p.index, h)
		} else {
			p.index[h] = l
		}
	}
	e.cache.Release()
}

// evict drops one entry to free memory (see victim); false when the cache is empty.
func (p *prefixCache) evict() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return false
	}
	p.remove(p.victim(true))
	return true
}

// drop removes every entry whose key satisfies match (an adapter removed or replaced).
func (p *prefixCache) drop(match func(key string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, tp := range p.tenants {
		for el := tp.lru.Front(); el != nil; {
			next := el.Next()
			if e := el.Value.(*prefixEntry); match(e.key) {
				p.remove(e) // may delete tp from p.tenants: fine while ranging
			}
			el = next
		}
	}
}

// len is the number of entries.
func (p *prefixCache) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// held is the number of entries tenant holds.
func (p *prefixCache) held(tenant string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if tp := p.tenants[tenant]; tp != nil {
		return tp.lru.Len()
	}
	return 0
}
