package kern

import (
	"runtime"
	"sync/atomic"
)

// Weights packed once. The packed GEMM copies B into 16-column panels on every call: for
// a frozen weight that is the same copy each time, and in a training step (each weight
// packed once forward as Wᵀ and once backward as W, the LM head's once per chunk of
// rows) it was 7.7 % of the CPU time on the Xeon of docs/performance.md, a pass over
// memory on which nothing else ran. A Frozen matrix keeps both packings after their first
// use when the process's budget (SetPackBudget: engine.cpu_prepack_bytes) has room; the
// products then read the panels in place, the same values, so the same bits.

// prePanels is a fixed B packed as the GEMM's column panels (in memory outside the Go
// heap, unmapped when the prePanels a matrix keeps is collected: a product keeps it alive
// while it runs; its views, from, do not): panel jp (columns [16jp,
// 16jp+16), zero-padded past n) holds every one of the k steps, 16 floats each, at
// p[jp·k·16:], so any k block of it is a contiguous run, read as a panel packed for the
// call is.
type prePanels struct {
	p  []float32
	k  int // the steps each panel holds
	p0 int // the first step of this view (a slab of a deeper product)
}

// packBudget is the bytes of packed panels the process may still create (SetPackBudget).
var packBudget atomic.Int64

// packLimit is the budget as set, for PackedBytes.
var packLimit atomic.Int64

// SetPackBudget sets how many bytes of packed weight panels the process may hold in all
// (8 bytes per weight for both packings; 0: none, every product packs its weight). Panels
// already made stay; their bytes count against the new budget and return to it when
// their matrix is collected.
func SetPackBudget(bytes int64) {
	old := packLimit.Swap(max(bytes, 0))
	packBudget.Add(max(bytes, 0) - old)
}

// PackedBytes is the bytes of packed weight panels the process holds now.
func PackedBytes() int64 { return packLimit.Load() - packBudget.Load() }

// takeBudget reserves n bytes of the budget, or reports false leaving it as it was.
func takeBudget(n int64) bool {
	for {
		left := packBudget.Load()
		if left < n {
			return false
		}
		if packBudget.CompareAndSwap(left, left-n) {
			return true
		}
	}
}

// newPrePanels packs the n×k (k steps, n columns) B that pack writes panel by panel, or
// returns nil when the budget has no room for it.
func newPrePanels(pack panelPacker, n, k int) *prePanels {
	npan := (n + nr - 1) / nr
	bytes := int64(npan) * int64(k) * nr * 4
	if !takeBudget(bytes) {
		return nil
	}
	mem, free := panelMemory(npan * k * nr)
	pp := &prePanels{p: mem, k: k}
	runtime.AddCleanup(pp, func(free func()) {
		free()
		packBudget.Add(bytes)
	}, free)
	split(npan, npan*k*nr, 1, func(lo, hi int) {
		for jp := lo; jp < hi; jp++ {
			pack(pp.p[jp*k*nr:][:k*nr], jp*nr, min(nr, n-jp*nr), 0, k)
		}
	})
	return pp
}

// from is the view of pp whose step 0 is pp's step p0 (nil stays nil).
func (pp *prePanels) from(p0 int) *prePanels {
	if pp == nil {
		return nil
	}
	v := *pp
	v.p0 += p0
	return &v
}

// panel is panel jp's k block at pc, kb steps deep.
func (pp *prePanels) panel(jp, pc, kb int) []float32 {
	return pp.p[jp*pp.k*nr+(pp.p0+pc)*nr:][:kb*nr]
}

// packerNT is the panel packer of B = Wᵀ.
func (w *Frozen) packerNT() panelPacker {
	if w.Format == F32 {
		return func(d []float32, j, cols, pc, kb int) { packB(d, w.f32, j, cols, pc, kb, w.Cols, true) }
	}
	return w.packNT
}

// packerNN is the panel packer of B = W.
func (w *Frozen) packerNN() panelPacker {
	if w.Format == F32 {
		return func(d []float32, j, cols, pc, kb int) { packB(d, w.f32, j, cols, pc, kb, w.Cols, false) }
	}
	return w.packNN
}

// preNT is W's panels as the B of C = A·Wᵀ, packed on the first product that asks; nil
// when the budget had no room then.
func (w *Frozen) preNT() *prePanels {
	w.ntOnce.Do(func() { w.ntPre = newPrePanels(w.packerNT(), w.Rows, w.Cols) })
	return w.ntPre
}

// preNN is W's panels as the B of C = A·W, as preNT.
func (w *Frozen) preNN() *prePanels {
	w.nnOnce.Do(func() { w.nnPre = newPrePanels(w.packerNN(), w.Cols, w.Rows) })
	return w.nnPre
}

// packed computes C (+)= A·Wᵀ (nt) or A·W through the packed GEMM, on W's kept panels
// when it has them; a float32 W without them takes the plain GEMM and its own choices
// (a row-major B read in place: inPlaceB).
func (w *Frozen) packed(c, a []float32, m int, acc, nt bool) {
	n, k, pre, pack := w.Rows, w.Cols, (*prePanels)(nil), w.packerNT
	if nt {
		pre = w.preNT()
	} else {
		n, k, pre, pack = w.Cols, w.Rows, w.preNN(), w.packerNN
	}
	if pre == nil && w.Format == F32 {
		gemm32(c, a, w.f32, m, n, k, false, nt, acc)
		return
	}
	gemmPacked(c, a, pack(), pre, m, n, k, false, acc)
	runtime.KeepAlive(pre) // its memory is unmapped when it is collected
}
