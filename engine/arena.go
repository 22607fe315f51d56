package engine

import (
	"math"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// Host buffers of training passes are recycled: a step allocates its activations (at
// 2048 tokens of SmolLM2, 2.6 GB over the layers, and the 400 MB logits), and fresh
// memory from the Go heap costs page faults, zeroing and garbage collection every step,
// while a recycled buffer costs one clear. Buffers sit in sync.Pools by size class (four
// per power of two), so the collector still reclaims what no pass takes back.

// arenaMin is the smallest buffer worth recycling (elements).
const arenaMin = 1024

// arenaPools holds the free buffers: one pool per size class and element size.
var arenaPools [2][256]sync.Pool

// arenaClass returns the pool and capacity for n elements of T (nil: not recycled).
func arenaClass[T kern.Float](n int) (*sync.Pool, int) {
	if n < arenaMin {
		return nil, n
	}
	e := bits.Len(uint(n - 1)) // n ≤ 1<<e
	step := 1 << (e - 3)
	capacity := (n + step - 1) &^ (step - 1)
	var z T
	return &arenaPools[unsafe.Sizeof(z)/8][e*4+capacity/step-5], capacity
}

// arenaGet returns n zeroed elements, recycled when a buffer of n's class is free.
func arenaGet[T kern.Float](n int) []T {
	s, recycled := arenaTake[T](n)
	if recycled {
		clear(s)
	}
	return s
}

// arenaGetRaw is arenaGet for a buffer its first writer overwrites whole (a product's
// output, a norm's): a recycled one keeps what it held, which saves its clear (at 512
// tokens of SmolLM2, 0.9 GB a training step, on one core while the other waits).
func arenaGetRaw[T kern.Float](n int) []T {
	s, _ := arenaTake[T](n)
	if arenaPoison {
		nan := T(math.NaN())
		for i := range s {
			s[i] = nan
		}
	}
	return s
}

// arenaPoison fills every buffer arenaGetRaw hands out with NaN (tests: a reader of
// what its writer left out shows up in the results).
var arenaPoison bool

// arenaTake returns n elements of a free buffer of n's class as it was left (recycled),
// or fresh zeroed memory.
func arenaTake[T kern.Float](n int) (s []T, recycled bool) {
	pool, capacity := arenaClass[T](n)
	if pool == nil {
		return make([]T, n), false
	}
	if b, ok := pool.Get().(*[]T); ok {
		return (*b)[:n], true
	}
	return make([]T, n, capacity), false
}

// arenaPut gives a buffer from arenaGet back.
func arenaPut[T kern.Float](s []T) {
	if pool, capacity := arenaClass[T](cap(s)); pool != nil && capacity == cap(s) {
		pool.Put(&s)
	}
}

// hostAlloc is pass.alloc on a host device for a pass that recycles its buffers; raw
// skips the clear (pass.allocOut).
func (p *pass[T]) hostAlloc(n int, raw bool) device.Tensor[T] {
	var s []T
	if raw {
		s = arenaGetRaw[T](n)
	} else {
		s = arenaGet[T](n)
	}
	p.host = append(p.host, s)
	return device.Host(s)
}
