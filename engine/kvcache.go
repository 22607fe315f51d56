package engine

import (
	"errors"
	"fmt"
	"sync"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// KVBlockLen is the number of positions in one KV-cache block.
const KVBlockLen = 16

// ErrKVPoolFull is returned (wrapped) when a KV pool has no free block left.
var ErrKVPoolFull = errors.New("kv pool has no free block")

// KVPool is device memory for the keys and values of many sequences, in blocks of
// BlockLen positions: per layer one K and one V tensor of Blocks×BlockLen×(Hkv·hd)
// elements. A sequence's KVCache lists the blocks that hold its positions, so sequences
// of different lengths share one pool without fragmentation, and blocks are
// reference-counted so that forked caches (several samples of one prompt, or a cached
// prefix) share the blocks they have in common until one of them writes (copy on
// write). Its methods are safe for concurrent use.
type KVPool[T kern.Float] struct {
	d        device.Device[T]
	owner    *devWeights[T] // the model whose keys these are
	blockLen int
	width    int // Hkv·hd
	k, v     []device.Tensor[T]

	mu   sync.Mutex
	free []int32 // free block ids, a stack
	refs []int32 // per block: the caches that hold it
}

// NewKVPool allocates a pool of the given number of blocks on the model's device. Each
// block takes BlockBytes of device memory.
func (m *Model) NewKVPool(blocks int) (*KVPool[float32], error) {
	return newKVPool(m.dev, m.dw, m.Cfg, blocks, KVBlockLen)
}

func newKVPool[T kern.Float](d device.Device[T], owner *devWeights[T], c Config, blocks, blockLen int) (*KVPool[T], error) {
	if blocks < 1 || blockLen < 1 || blockLen&(blockLen-1) != 0 {
		return nil, fmt.Errorf("kv pool: %d blocks of %d positions (want ≥ 1 block, a power-of-two length)", blocks, blockLen)
	}
	p := &KVPool[T]{d: d, owner: owner, blockLen: blockLen, width: c.KVHeads * c.HeadDim,
		free: make([]int32, blocks), refs: make([]int32, blocks)}
	for i := range p.free {
		p.free[i] = int32(blocks - 1 - i) // hand out low ids first
	}
	n := blocks * blockLen * p.width
	for l := 0; l < c.Layers; l++ {
		p.k = append(p.k, d.Alloc(n))
		p.v = append(p.v, d.Alloc(n))
	}
	if err := d.Err(); err != nil {
		p.Close()
		return nil, fmt.Errorf("kv pool of %d blocks on %s: %w", blocks, d.Name(), err)
	}
	return p, nil
}

// BlockLen is the number of positions per block.
func (p *KVPool[T]) BlockLen() int { return p.blockLen }

// Blocks is the pool's capacity in blocks.
func (p *KVPool[T]) Blocks() int { return len(p.refs) }

// FreeBlocks is the number of blocks no cache holds.
func (p *KVPool[T]) FreeBlocks() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// BlockBytes is the device memory one block takes (keys and values of every layer).
func (p *KVPool[T]) BlockBytes() int64 {
	var e T
	return int64(2*len(p.k)*p.blockLen*p.width) * int64(device.Host([]T{e}).ElemSize())
}

// Close frees the pool's device memory. No cache of the pool may be used afterwards.
func (p *KVPool[T]) Close() {
	for l := range p.k {
		p.d.Free(p.k[l])
		p.d.Free(p.v[l])
	}
	p.k, p.v = nil, nil
}

// NewCache returns an empty cache in the pool.
func (p *KVPool[T]) NewCache() *KVCache[T] { return &KVCache[T]{pool: p} }

func (p *KVPool[T]) take() (int32, error) {
	if len(p.free) == 0 {
		return 0, fmt.Errorf("%w (%d blocks of %d positions)", ErrKVPoolFull, len(p.refs), p.blockLen)
	}
	b := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.refs[b] = 1
	return b, nil
}

func (p *KVPool[T]) drop(b int32) {
	if p.refs[b]--; p.refs[b] == 0 {
		p.free = append(p.free, b)
	}
}

// KVCache is one sequence's keys and values: the blocks of a pool that hold positions
// [0, Len()). A cache is used by one goroutine at a time.
type KVCache[T kern.Float] struct {
	pool   *KVPool[T]
	blocks []int32
	n      int
}

// Len is the number of positions the cache holds.
func (c *KVCache[T]) Len() int { return c.n }

// Pool is the pool the cache's blocks come from.
func (c *KVCache[T]) Pool() *KVPool[T] { return c.pool }

// Fork returns a cache with the same positions that shares c's blocks; whichever of the
// two writes into a shared block first gets its own copy of it.
func (c *KVCache[T]) Fork() *KVCache[T] { return c.ForkPrefix(c.n) }

// ForkPrefix returns a cache that holds the first n positions of c (0 ≤ n ≤ Len) and
// shares c's blocks for them, as Fork does: a cached prompt prefix served to a new
// sequence. A partly filled last block stays shared until one of the two writes into it.
// Only blocks holding positions are shared: blocks a failed step reserved stay c's.
func (c *KVCache[T]) ForkPrefix(n int) *KVCache[T] {
	if n < 0 || n > c.n {
		panic(fmt.Sprintf("engine: ForkPrefix(%d) of a cache of %d positions", n, c.n))
	}
	p := c.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	nb := (n + p.blockLen - 1) / p.blockLen
	for _, b := range c.blocks[:nb] {
		p.refs[b]++
	}
	return &KVCache[T]{pool: p, blocks: append([]int32(nil), c.blocks[:nb]...), n: n}
}

// BlocksToAppend is the number of free blocks appending n positions would take from the
// pool: new blocks, plus the copy of a shared, partly filled last block. A scheduler
// plans a step's memory with it before running the step.
func (c *KVCache[T]) BlocksToAppend(n int) int {
	p := c.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	bl := p.blockLen
	need := max(0, (c.n+n+bl-1)/bl-len(c.blocks))
	if n > 0 && c.n%bl != 0 && p.refs[c.blocks[c.n/bl]] > 1 {
		need++
	}
	return need
}

// Blocks is the number of pool blocks the cache holds (shared ones included).
func (c *KVCache[T]) Blocks() int { return len(c.blocks) }

// Release gives the cache's blocks back to the pool; the cache is empty afterwards. They
// go back last first, so that the next cache to take as many is handed them in the same
// order: a sequence whose blocks are in order is read in place by decode attention
// rather than gathered (device.contiguous).
func (c *KVCache[T]) Release() {
	p := c.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(c.blocks) - 1; i >= 0; i-- {
		p.drop(c.blocks[i])
	}
	c.blocks, c.n = nil, 0
}

// reserve makes room for n more positions and returns their slots (block·BlockLen +
// offset). A shared block that would be written is copied first. The positions count
// only after commit, so a failed step leaves the cache as it was.
func (c *KVCache[T]) reserve(n int) ([]int32, error) {
	p := c.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	bl := p.blockLen
	if c.n%bl != 0 {
		// The partly filled block that position c.n falls in (a failed step may have left
		// fresh blocks after it).
		last := c.n / bl
		if b := c.blocks[last]; p.refs[b] > 1 {
			nb, err := p.take()
			if err != nil {
				return nil, err
			}
			span := bl * p.width
			for l := range p.k {
				p.d.Copy(p.k[l].Slice(int(nb)*span, int(nb+1)*span), p.k[l].Slice(int(b)*span, int(b+1)*span))
				p.d.Copy(p.v[l].Slice(int(nb)*span, int(nb+1)*span), p.v[l].Slice(int(b)*span, int(b+1)*span))
			}
			p.drop(b)
			c.blocks[last] = nb
		}
	}
	for need := (c.n + n + bl - 1) / bl; len(c.blocks) < need; {
		b, err := p.take()
		if err != nil {
			return nil, err
		}
		c.blocks = append(c.blocks, b)
	}
	slots := make([]int32, n)
	for i := range slots {
		pos := c.n + i
		slots[i] = c.blocks[pos/bl]*int32(bl) + int32(pos%bl)
	}
	return slots, nil
}

func (c *KVCache[T]) commit(n int) { c.n += n }
