package device

import (
	"math"
	"sync"

	"github.com/tuft-go/tuft/engine/kern"
)

// headChunkBytes bounds the one logits buffer of a CPU LossHead call: rows are computed
// a chunk at a time, each chunk's float32 logits at most this many bytes (headChunk).
// 48 MiB is 256 rows of SmolLM2's 49,152-token vocabulary: at 64 rows (12 MiB) each
// vocabulary weight served 64 rows per pass, and a 512-token training step took 9 % longer
// on the Xeon of docs/performance.md (the head's two products ran at 87 GFLOP/s, at 256
// rows at 119–136). 96 MiB (512 rows) was 1–4 % faster again, for twice the memory. A
// variable so tests can make chunks small.
var headChunkBytes = 48 << 20

// headBufs pools the logits buffers across LossHead calls: up to 48 MiB each, two calls
// a training step, a fresh one page-faulted in and zeroed every time.
var headBufs sync.Pool

// headChunk is the rows per chunk for rows rows over a vocabulary of v: at most what
// headChunkBytes holds (a multiple of 16, at least 16), the chunks as equal as the row
// count allows (300 rows of SmolLM2 run as 2×150, not 256 + 44: a short last chunk is
// the slowest per row).
func headChunk(rows, v int) int {
	most := max(16, headChunkBytes/(4*v)/16*16)
	n := max(1, (rows+most-1)/most)
	return (rows + n - 1) / n
}

// LossHead implements Device: per chunk of rows, the logits by one product (parallel in
// kern), then per row (spread over the cores) the log-sum-exp in float64, the targets'
// log-probabilities and, when E is wanted, the probabilities in place of the logits for
// the product E = P·W. Every value depends on its row alone, and the products' sums run
// in a fixed order, so the result is the same whatever the number of cores.
func (c *CPU[T]) LossHead(h *Head[T]) {
	if h.Rows == 0 {
		return
	}
	D, V := h.D, h.V
	c.headChunks(h, func(lg []T, r0, n int) {
		spread(n, rowGrain(V), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				r := r0 + i
				row := lg[i*V : (i+1)*V]
				lse := T(logSumExp(row))
				if !h.LSE.Empty() {
					h.LSE.h[r] = lse
				}
				for j := h.Off.h[r]; j < h.Off.h[r+1]; j++ {
					h.LogP.h[j] = row[h.Tok.h[j]] - lse
				}
				if !h.E.Empty() {
					kern.Exp(row, row, 1, -lse)
				}
			}
		})
		if !h.E.Empty() {
			c.MatMulNN(h.E.Slice(r0*D, (r0+n)*D), Host(lg), h.W, n, D, V, false)
			for k := range h.Lora {
				l := &h.Lora[k]
				if lo, hi := l.Overlap(r0, n); lo < hi && !l.F.Empty() {
					c.MatMulNN(l.F.Slice((lo-l.Start)*l.R, (hi-l.Start)*l.R), Host(lg[(lo-r0)*V:(hi-r0)*V]), l.B, hi-lo, l.R, V, false)
				}
			}
		}
	})
}

// headChunks calls f for each chunk of headChunk rows of h in order, with the
// chunk's logits (headLogits) in one buffer reused across chunks.
func (c *CPU[T]) headChunks(h *Head[T], f func(lg []T, r0, n int)) {
	chunk := headChunk(h.Rows, h.V)
	need := chunk * h.V
	var buf []T
	if p, ok := headBufs.Get().(*[]T); ok && cap(*p) >= need {
		buf = (*p)[:need] // every chunk's product overwrites its logits: no clearing
	} else {
		buf = make([]T, need)
	}
	defer headBufs.Put(&buf)
	for r0 := 0; r0 < h.Rows; r0 += chunk {
		n := min(chunk, h.Rows-r0)
		lg := buf[:n*h.V]
		c.headLogits(h, lg, r0, n)
		f(lg, r0, n)
	}
}

// headLogits computes the logits of rows [r0, r0+n) of h into lg: the base product, then
// each LoRA run's Z·Bᵀ on its rows.
func (c *CPU[T]) headLogits(h *Head[T], lg []T, r0, n int) {
	D, V := h.D, h.V
	c.MatMulNT(Host(lg), h.H.Slice(r0*D, (r0+n)*D), h.W, n, V, D, false)
	for k := range h.Lora {
		l := &h.Lora[k]
		if lo, hi := l.Overlap(r0, n); lo < hi {
			c.MatMulNT(Host(lg[(lo-r0)*V:(hi-r0)*V]), l.Z.Slice((lo-l.Start)*l.R, (hi-l.Start)*l.R), l.B, hi-lo, V, l.R, true)
		}
	}
}

// LossHeadLoraGrad implements Device: per chunk of rows, the logits again, then per row
// dL/dlogits = Σⱼ gⱼ·onehot(tⱼ) − (Σⱼ gⱼ)·softmax in place (targets added in order), then
// each run's DB += dL/dlogitsᵀ·Z over its rows in the chunk; chunks in order.
func (c *CPU[T]) LossHeadLoraGrad(h *Head[T], g Tensor[T]) {
	if h.Rows == 0 {
		return
	}
	V := h.V
	c.headChunks(h, func(lg []T, r0, n int) {
		spread(n, rowGrain(V), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				r := r0 + i
				row := lg[i*V : (i+1)*V]
				var s float64
				for j := h.Off.h[r]; j < h.Off.h[r+1]; j++ {
					s += float64(g.h[j])
				}
				kern.Exp(row, row, 1, -h.LSE.h[r])
				ns := T(-s)
				for v := range row {
					row[v] *= ns
				}
				for j := h.Off.h[r]; j < h.Off.h[r+1]; j++ {
					row[h.Tok.h[j]] += g.h[j]
				}
			}
		})
		for k := range h.Lora {
			l := &h.Lora[k]
			if lo, hi := l.Overlap(r0, n); lo < hi && !l.DB.Empty() {
				c.MatMulTN(l.DB, Host(lg[(lo-r0)*V:(hi-r0)*V]), l.Z.Slice((lo-l.Start)*l.R, (hi-l.Start)*l.R), V, l.R, hi-lo, true)
			}
		}
	})
}

// logSumExp is log Σ exp(x) of a row, with its sum in float64 (as logSoftmaxRow).
func logSumExp[T Float](x []T) float64 {
	// kern.Max rather than math.Max, a call per element (1.6 % of a 512-token training
	// step); the same value, NaN included.
	m := math.Inf(-1)
	if len(x) > 0 {
		m = float64(kern.Max(x))
	}
	var e [expChunk]T
	var s float64
	for c := 0; c < len(x); c += expChunk {
		part := e[:min(expChunk, len(x)-c)]
		kern.Exp(part, x[c:c+len(part)], 1, T(-m))
		s += sum64(part)
	}
	return m + math.Log(s)
}

// LossHeadBack implements Device, in parallel over rows; a frozen W's rows are widened
// one at a time.
func (c *CPU[T]) LossHeadBack(h *Head[T], dh, g Tensor[T]) {
	D := h.D
	spread(h.Rows, rowGrain(D), func(lo, hi int) {
		var wide []float32
		if h.W.fz != nil {
			wide = make([]float32, D)
		}
		for r := lo; r < hi; r++ {
			out := dh.h[r*D : (r+1)*D]
			var s float64
			for j := h.Off.h[r]; j < h.Off.h[r+1]; j++ {
				s += float64(g.h[j])
			}
			e := h.E.h[r*D : (r+1)*D]
			for i := range out {
				out[i] = T(-s) * e[i]
			}
			for j := h.Off.h[r]; j < h.Off.h[r+1]; j++ {
				t := int(h.Tok.h[j])
				if wide != nil {
					h.W.fz.Row(wide, t)
					kern.Axpy(any(g.h[j]).(float32), wide, any(out).([]float32))
					continue
				}
				kern.Axpy(g.h[j], h.W.h[t*D:(t+1)*D], out)
			}
		}
	})
}
