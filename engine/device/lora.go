package device

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tuft-go/tuft/engine/kern"
)

// Grouped LoRA products (Punica's SGMV): one call computes the LoRA terms of every run of
// rows of a pass, whatever adapter each run uses, instead of a pair of matrix products per
// run. A device launches one kernel per stage across all runs (a GPU); the CPU spreads
// the runs over its cores.

// LoraRun is one stretch of consecutive rows of a grouped LoRA product that share an
// adapter: rows [Row, Row+N) of X and Y, the pair A [Rank×in] and B [out×Rank] with its
// scale, Z [N×Rank] (written by LoraForward, read by LoraBackward), and the gradient
// tensors of A and B (both empty: the run takes no gradients).
type LoraRun[T Float] struct {
	Row, N, Rank int
	A, B         Tensor[T]
	Scale        T
	Z            Tensor[T]
	GA, GB       Tensor[T]
}

// Grad reports whether the run accumulates gradients.
func (r *LoraRun[T]) Grad() bool { return !r.GA.Empty() }

// LoraScratch is the elements LoraBackward's dz takes for runs: Σ N·Rank.
func LoraScratch[T Float](runs []LoraRun[T]) int {
	n := 0
	for i := range runs {
		n += runs[i].N * runs[i].Rank
	}
	return n
}

// LoraOps is the grouped LoRA product a Device implements.
type LoraOps[T Float] interface {
	// LoraForward computes, for each run, Z = Scale·X_r·Aᵀ (overwriting Z) and
	// Y_r += Z·Bᵀ, where X_r and Y_r are the run's rows of x[·×in] and y[·×out]. Runs
	// must not overlap; rows outside every run are left as they are.
	LoraForward(y, x Tensor[T], runs []LoraRun[T], in, out int)
	// LoraBackward is LoraForward's backward pass given dy[·×out]: for each run, with
	// dZ = Scale·dY_r·B (written to the run's share of dz, LoraScratch elements in run
	// order), it accumulates GB += dY_rᵀ·Z and GA += dZᵀ·X_r for runs with gradients
	// (several runs may share gradient tensors: they accumulate in run order) and adds
	// dZ·A to dx's rows of the run (dx empty: not needed).
	LoraBackward(dx, dy, x, dz Tensor[T], runs []LoraRun[T], in, out int)
}

// LoraFusedOps is a Device that runs one adapter's LoRA term inside the base product it
// adds to (kern.FrozenMatMulNTLoRA): one pass over the activations instead of three.
// Each call covers all m rows with the one run and gives the bits of the separate calls;
// where the device would not fuse it reports false, having written nothing.
type LoraFusedOps[T Float] interface {
	// MatMulNTLora is MatMulNT(y, x, w, m, n, k, false) then LoraForward(y, x, {run}).
	MatMulNTLora(y, x, w Tensor[T], run *LoraRun[T], m, n, k int) bool
	// MatMulNNLora is MatMulNN(dx, dy, w, m, n, k, acc) then LoraBackward's dz and dx
	// for run (dz its m·Rank elements), without the gradients: LoraGrads adds those.
	MatMulNNLora(dx, dy, w, dz Tensor[T], run *LoraRun[T], m, n, k int, acc bool) bool
	// LoraGrads is LoraBackward's gradient accumulation alone, given the dz it writes.
	LoraGrads(dy, x, dz Tensor[T], runs []LoraRun[T], in, out int)
}

// storage identifies the memory behind a tensor, so runs sharing gradient tensors are
// found.
func (t Tensor[E]) storage() uintptr {
	if t.h != nil {
		return uintptr(unsafe.Pointer(unsafe.SliceData(t.h)))
	}
	return t.p
}

// GradGroups lists, for each distinct gradient target among the runs with gradients
// (runs sharing GA), its run indices in order. Devices accumulate a group's runs one
// after another and different groups at once, so the sums do not depend on scheduling.
func GradGroups[T Float](runs []LoraRun[T]) [][]int {
	var groups [][]int
	var keys []uintptr
next:
	for i := range runs {
		if !runs[i].Grad() {
			continue
		}
		k := runs[i].GA.storage()
		for g, gk := range keys {
			if gk == k {
				groups[g] = append(groups[g], i)
				continue next
			}
		}
		keys = append(keys, k)
		groups = append(groups, []int{i})
	}
	return groups
}

// loraParallelWork is the multiply-adds below which a grouped product runs on the
// caller's goroutine alone (kern's threshold for one product).
const loraParallelWork = 1 << 16

// eachRun calls f(i) for i in [0, n) on up to GOMAXPROCS goroutines, which take the next
// index as they finish one (runs are ragged). Each f must write only its own outputs, so
// the results do not depend on the number of goroutines.
func eachRun(n, work int, f func(i int)) {
	w := min(kern.Procs(), n)
	if w <= 1 || work < loraParallelWork {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	worker := func() {
		for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
			f(i)
		}
	}
	for range w - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker()
		}()
	}
	worker()
	wg.Wait()
}

// loraWork is the multiply-adds of one stage of a grouped product (in+out per row and
// rank unit), the measure eachRun's threshold is in.
func loraWork[T Float](runs []LoraRun[T], in, out int) int {
	w := 0
	for i := range runs {
		w += runs[i].N * runs[i].Rank * (in + out)
	}
	return w
}

// LoraForward implements LoraOps: each run's two products are kern's (as a per-run
// caller would make them), the runs spread over the cores; each run writes only its Z
// and its rows of y.
func (*CPU[T]) LoraForward(y, x Tensor[T], runs []LoraRun[T], in, out int) {
	eachRun(len(runs), loraWork(runs, in, out), func(i int) {
		r := &runs[i]
		z := r.Z.h[:r.N*r.Rank]
		kern.MatMulNT(z, x.h[r.Row*in:(r.Row+r.N)*in], r.A.h, r.N, r.Rank, in, false)
		for j := range z {
			z[j] *= r.Scale
		}
		kern.MatMulNT(y.h[r.Row*out:(r.Row+r.N)*out], z, r.B.h, r.N, out, r.Rank, true)
	})
}

// LoraBackward implements LoraOps in two rounds: dZ and dX per run (each writes only its
// rows), then the gradients per group of runs sharing them (a group in run order).
func (c *CPU[T]) LoraBackward(dx, dy, x, dz Tensor[T], runs []LoraRun[T], in, out int) {
	off := loraOffsets(runs)
	eachRun(len(runs), loraWork(runs, in, out), func(i int) {
		r := &runs[i]
		dzr := dz.h[off[i] : off[i]+r.N*r.Rank]
		kern.MatMulNN(dzr, dy.h[r.Row*out:(r.Row+r.N)*out], r.B.h, r.N, r.Rank, out, false)
		for j := range dzr {
			dzr[j] *= r.Scale
		}
		if !dx.Empty() {
			kern.MatMulNN(dx.h[r.Row*in:(r.Row+r.N)*in], dzr, r.A.h, r.N, in, r.Rank, true)
		}
	})
	c.LoraGrads(dy, x, dz, runs, in, out)
}

// loraOffsets are the runs' offsets in dz (LoraScratch).
func loraOffsets[T Float](runs []LoraRun[T]) []int {
	off := make([]int, len(runs))
	for i, o := 1, 0; i < len(runs); i++ {
		o += runs[i-1].N * runs[i-1].Rank
		off[i] = o
	}
	return off
}

// LoraGrads implements LoraFusedOps.
func (*CPU[T]) LoraGrads(dy, x, dz Tensor[T], runs []LoraRun[T], in, out int) {
	off := loraOffsets(runs)
	groups := GradGroups(runs)
	eachRun(len(groups), loraWork(runs, in, out), func(g int) {
		for _, i := range groups[g] {
			r := &runs[i]
			kern.MatMulTN(r.GB.h, dy.h[r.Row*out:(r.Row+r.N)*out], r.Z.h, out, r.Rank, r.N, true)
			kern.MatMulTN(r.GA.h, dz.h[off[i]:off[i]+r.N*r.Rank], x.h[r.Row*in:(r.Row+r.N)*in], r.Rank, in, r.N, true)
		}
	})
}

// MatMulNTLora implements LoraFusedOps for float32 frozen weights (kern.FrozenMatMulNTLoRA).
func (*CPU[T]) MatMulNTLora(y, x, w Tensor[T], r *LoraRun[T], m, n, k int) bool {
	if w.fz == nil || r.Row != 0 || r.N != m {
		return false
	}
	frozenShape(w.fz, n, k)
	l := kern.LoRA{Z: any(r.Z.h).([]float32), Bz: any(r.A.h).([]float32), Bt: any(r.B.h).([]float32), R: r.Rank, Scale: float32(r.Scale)}
	return kern.FrozenMatMulNTLoRA(any(y.h).([]float32), any(x.h).([]float32), w.fz, m, l)
}

// MatMulNNLora implements LoraFusedOps for float32 frozen weights (kern.FrozenMatMulNNLoRA).
func (*CPU[T]) MatMulNNLora(dx, dy, w, dz Tensor[T], r *LoraRun[T], m, n, k int, acc bool) bool {
	if w.fz == nil || r.Row != 0 || r.N != m {
		return false
	}
	frozenShape(w.fz, k, n)
	l := kern.LoRA{Z: any(dz.h).([]float32), Bz: any(r.B.h).([]float32), Bt: any(r.A.h).([]float32), R: r.Rank, Scale: float32(r.Scale)}
	return kern.FrozenMatMulNNLoRA(any(dx.h).([]float32), any(dy.h).([]float32), w.fz, m, acc, l)
}
