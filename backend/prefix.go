package backend

import (
	"container/list"
	"encoding/binary"
	"hash/fnv"
	"slices"
	"sync"

	"github.com/tuft-go/tuft/engine"
)

// prefixCache keeps the KV blocks of recent prompts, per adapter, so that a request
// whose prompt starts with the same whole blocks of tokens as an earlier one's (a shared
// system prompt, the same question sampled again) skips computing them. Entries are
// found by a chain hash over whole blocks (block d's hash covers blocks 0…d), checked
// token by token, reference-counted through the pool (an entry shares its blocks with
// the caches forked from it) and evicted least recently used first when the pool needs
// memory or the cache holds too many entries. Safe for concurrent use.
type prefixCache struct {
	blockLen   int
	maxEntries int

	mu    sync.Mutex
	index map[uint64][]*prefixEntry // chain hash of the first d blocks → entries that hold them
	lru   *list.List                // of *prefixEntry, most recently used first
}

type prefixEntry struct {
	key    string  // the adapter (and its weights' generation)
	toks   []int32 // whole blocks
	hashes []uint64
	cache  *engine.KVCache[float32] // exactly len(toks) positions
	el     *list.Element
}

func newPrefixCache(blockLen, maxEntries int) *prefixCache {
	return &prefixCache{blockLen: blockLen, maxEntries: maxEntries, index: map[uint64][]*prefixEntry{}, lru: list.New()}
}

// chain returns the chain hashes of toks' first whole blocks, at most blocks of them.
func (p *prefixCache) chain(key string, toks []int32, blocks int) []uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	out := make([]uint64, 0, blocks)
	var b [4]byte
	for d := 0; d < blocks; d++ {
		for _, t := range toks[d*p.blockLen : (d+1)*p.blockLen] {
			binary.LittleEndian.PutUint32(b[:], uint32(t))
			h.Write(b[:])
		}
		out = append(out, h.Sum64())
	}
	return out
}

// lookup finds the longest cached prefix of toks for key, at most limit tokens, and
// returns a cache holding it (a fork the caller owns) and its length; nil, 0 on a miss.
func (p *prefixCache) lookup(key string, toks []int32, limit int) (*engine.KVCache[float32], int) {
	blocks := min(limit, len(toks)) / p.blockLen
	if blocks == 0 {
		return nil, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e, d := p.find(key, toks, p.chain(key, toks, blocks))
	if e == nil {
		return nil, 0
	}
	p.lru.MoveToFront(e.el)
	n := d * p.blockLen
	return e.cache.ForkPrefix(n), n
}

// find returns the entry holding the most of toks' leading blocks (with their chain
// hashes hs) and how many. Callers hold p.mu.
func (p *prefixCache) find(key string, toks []int32, hs []uint64) (*prefixEntry, int) {
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
			if e.key == key && len(e.toks) >= d*bl && slices.Equal(e.toks[:d*bl], toks[:d*bl]) {
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

// insert remembers the whole blocks of toks, whose keys and values c holds (c keeps its
// own reference; the entry takes a fork).
func (p *prefixCache) insert(key string, toks []int32, c *engine.KVCache[float32]) {
	blocks := min(len(toks), c.Len()) / p.blockLen
	if blocks == 0 || p.maxEntries <= 0 {
		return
	}
	n := blocks * p.blockLen
	p.mu.Lock()
	defer p.mu.Unlock()
	hs := p.chain(key, toks, blocks)
	old, d := p.find(key, toks, hs)
	if old != nil && d == blocks {
		p.lru.MoveToFront(old.el)
		return
	}
	e := &prefixEntry{key: key, toks: append([]int32(nil), toks[:n]...), hashes: hs, cache: c.ForkPrefix(n)}
	e.el = p.lru.PushFront(e)
	for _, h := range hs {
		p.index[h] = append(p.index[h], e)
	}
	// An entry the new one extends holds nothing the new one does not.
	if old != nil && len(old.toks) == d*p.blockLen {
		p.remove(old)
	}
	for p.lru.Len() > p.maxEntries {
		p.remove(p.lru.Back().Value.(*prefixEntry))
	}
}

// remove drops an entry and releases its blocks. Callers hold p.mu.
func (p *prefixCache) remove(e *prefixEntry) {
	p.lru.Remove(e.el)
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

// evict drops the least recently used entry; false when the cache is empty.
func (p *prefixCache) evict() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.lru.Back()
	if b == nil {
		return false
	}
	p.remove(b.Value.(*prefixEntry))
	return true
}

// drop removes every entry whose key satisfies match (an adapter removed or replaced).
func (p *prefixCache) drop(match func(key string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for el := p.lru.Front(); el != nil; {
		next := el.Next()
		if e := el.Value.(*prefixEntry); match(e.key) {
			p.remove(e)
		}
		el = next
	}
}

// len is the number of entries.
func (p *prefixCache) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lru.Len()
}
