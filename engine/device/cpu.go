package device

import (
	"math"
	"math/bits"
	"sync"

	"github.com/tuft-go/tuft/engine/kern"
)

// CPU is the host device: tensors are Go slices and the products are engine/kern's
// (AVX2 assembly where the machine has it). Frozen matrices placed with WeightMatrix are
// stored in the device's weight format (kern.Frozen: float32, bfloat16, Q8_0 or Q4_1)
// when T is float32; activations, gradients and everything else stay T. It is safe for
// concurrent use; operations spread over GOMAXPROCS goroutines.
type CPU[T Float] struct {
	format kern.WeightFormat
}

// NewCPU returns the host device with frozen weights at full precision (T).
func NewCPU[T Float]() *CPU[T] { return &CPU[T]{} }

// NewCPUWeights returns the host device storing frozen float32 matrices in format f.
func NewCPUWeights[T Float](f kern.WeightFormat) *CPU[T] { return &CPU[T]{format: f} }

var (
	_ Device[float32]       = (*CPU[float32])(nil)
	_ MatrixPlacer[float32] = (*CPU[float32])(nil)
)

// WeightFormat is the format WeightMatrix stores float32 matrices in.
func (c *CPU[T]) WeightFormat() kern.WeightFormat { return c.format }

// Name implements Device.
func (*CPU[T]) Name() string { return "cpu" }

// HostMemory implements Device: CPU tensors are host slices.
func (*CPU[T]) HostMemory() bool { return true }

// Err implements Device; the CPU never fails an operation.
func (*CPU[T]) Err() error { return nil }

// Alloc implements Device.
func (*CPU[T]) Alloc(n int) Tensor[T] { return Host(make([]T, n)) }

// Free implements Device (the garbage collector frees host memory).
func (*CPU[T]) Free(Tensor[T]) {}

// AllocInts implements Device.
func (*CPU[T]) AllocInts(n int) Tensor[int32] { return Host(make([]int32, n)) }

// FreeInts implements Device.
func (*CPU[T]) FreeInts(Tensor[int32]) {}

// Upload implements Device.
func (*CPU[T]) Upload(dst Tensor[T], src []T) { copy(dst.h, src) }

// Download implements Device.
func (*CPU[T]) Download(dst []T, src Tensor[T]) { copy(dst, src.h) }

// Ints implements Device: the tensor aliases src.
func (*CPU[T]) Ints(src []int32) Tensor[int32] { return Host(src) }

// Copy implements Device.
func (*CPU[T]) Copy(dst, src Tensor[T]) {
	spread(min(len(dst.h), len(src.h)), elemGrain, func(lo, hi int) { copy(dst.h[lo:hi], src.h[lo:hi]) })
}

// Weight implements Device: the tensor aliases src.
func (*CPU[T]) Weight(src []T) Tensor[T] { return Host(src) }

// WeightMatrix implements MatrixPlacer: a float32 matrix in the device's format (at f32
// a kern.Frozen aliasing src, so its products take the frozen kernels: the general GEMM
// packs W on every call, which cost a batch-16 decode step more than the product), any
// other T an alias of src.
func (c *CPU[T]) WeightMatrix(src []T, rows, cols int) Tensor[T] {
	s32, ok := any(src).([]float32)
	if !ok || len(src) == 0 {
		return Host(src)
	}
	return FrozenMatrix[T](kern.NewFrozen(s32, rows, cols, c.format))
}

// frozenShape panics unless w is the [n×k] matrix a product names: the kernels read its
// shape from w.
func frozenShape(w *kern.Frozen, n, k int) {
	if w.Rows != n || w.Cols != k {
		panic("device: frozen matrix shape does not match the product")
	}
}

// MatMulNT implements Device.
func (*CPU[T]) MatMulNT(c, a, b Tensor[T], m, n, k int, acc bool) {
	if b.fz != nil {
		frozenShape(b.fz, n, k)
		if b.wide {
			kern.FrozenMatMulNTWide(any(c.h).([]float32), any(a.h).([]float32), b.fz, m, acc)
			return
		}
		kern.FrozenMatMulNT(any(c.h).([]float32), any(a.h).([]float32), b.fz, m, acc)
		return
	}
	kern.MatMulNT(c.h, a.h, b.h, m, n, k, acc)
}

// MatMulNTShared implements Device: frozen weights go to kern.FrozenMatMulNTShared (a
// decode row's products in one split), any other product to MatMulNT alone.
func (c *CPU[T]) MatMulNTShared(a Tensor[T], outs []SharedOut[T], m, k int) {
	fz := make([]kern.FrozenOut, 0, len(outs))
	for _, o := range outs {
		if o.W.fz == nil {
			fz = nil
			break
		}
		frozenShape(o.W.fz, o.N, k)
		fz = append(fz, kern.FrozenOut{C: any(o.C.h).([]float32), W: o.W.fz, Wide: o.W.wide})
	}
	if fz == nil {
		for _, o := range outs {
			c.MatMulNT(o.C, a, o.W, m, o.N, k, false)
		}
		return
	}
	kern.FrozenMatMulNTShared(any(a.h).([]float32), fz, m)
}

// MatMulNN implements Device.
func (*CPU[T]) MatMulNN(c, a, b Tensor[T], m, n, k int, acc bool) {
	if b.fz != nil {
		frozenShape(b.fz, k, n)
		kern.FrozenMatMulNN(any(c.h).([]float32), any(a.h).([]float32), b.fz, m, acc)
		return
	}
	kern.MatMulNN(c.h, a.h, b.h, m, n, k, acc)
}

// MatMulTN implements Device.
func (*CPU[T]) MatMulTN(c, a, b Tensor[T], m, n, k int, acc bool) {
	kern.MatMulTN(c.h, a.h, b.h, m, n, k, acc)
}

// Add implements Device.
func (*CPU[T]) Add(out, a, b Tensor[T]) {
	spread(len(out.h), elemGrain, func(lo, hi int) {
		o, x, y := out.h[lo:hi], a.h[lo:hi], b.h[lo:hi]
		for i := range o {
			o[i] = x[i] + y[i]
		}
	})
}

// Scale implements Device.
func (*CPU[T]) Scale(x Tensor[T], s T) {
	for i := range x.h {
		x.h[i] *= s
	}
}

// AddRows implements Device.
func (*CPU[T]) AddRows(y, b Tensor[T], rows int) {
	n := b.n
	for r := 0; r < rows; r++ {
		kern.Axpy(1, b.h, y.h[r*n:r*n+n])
	}
}

// Embed implements Device.
func (*CPU[T]) Embed(x, table Tensor[T], idx Tensor[int32], d int) {
	if table.fz != nil {
		x32 := any(x.h).([]float32)
		for i, t := range idx.h {
			table.fz.Row(x32[i*d:(i+1)*d], int(t))
		}
		return
	}
	for i, t := range idx.h {
		copy(x.h[i*d:(i+1)*d], table.h[int(t)*d:int(t)*d+d])
	}
}

// RMSNorm implements Device.
func (*CPU[T]) RMSNorm(y, rstd, x, w Tensor[T], rows, d int, eps float64) {
	spread(rows, rowGrain(d), func(lo, hi int) { rmsNormRows(y, rstd, x, w, lo, hi, d, eps) })
}

func rmsNormRows[T Float](y, rstd, x, w Tensor[T], lo, hi, d int, eps float64) {
	for r := lo; r < hi; r++ {
		xr := x.h[r*d : r*d+d]
		rstd.h[r] = normRow(y.h[r*d:r*d+d], xr, w.h, sumSq64(xr), d, eps)
	}
}

// normRow writes RMSNorm's y = x·s·w for one row whose sum of squares (in float64) is ss,
// and returns s: the one place of the norm's arithmetic (RMSNorm, AddRMSNorm).
func normRow[T Float](y, x, w []T, ss float64, d int, eps float64) T {
	s := T(1 / math.Sqrt(ss/float64(d)+eps))
	for i, v := range x {
		y[i] = v * s * w[i]
	}
	return s
}

// AddRMSNorm implements Device: Add's sums and rmsNormRows' arithmetic, row by row, so
// the bits are those of the two operations.
func (*CPU[T]) AddRMSNorm(sum, y, rstd, a, b, w Tensor[T], rows, d int, eps float64) {
	spread(rows, rowGrain(d), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			ar, br, sr := a.h[r*d:r*d+d], b.h[r*d:r*d+d], sum.h[r*d:r*d+d]
			for i := range sr {
				sr[i] = ar[i] + br[i]
			}
			rstd.h[r] = normRow(y.h[r*d:r*d+d], sr, w.h, sumSq64(sr), d, eps)
		}
	})
}

// RMSNormBack implements Device.
func (*CPU[T]) RMSNormBack(dx, dy, x, w, rstd Tensor[T], rows, d int) {
	spread(rows, rowGrain(d), func(lo, hi int) { rmsNormBackRows(dx, dy, x, w, rstd, lo, hi, d) })
}

func rmsNormBackRows[T Float](dx, dy, x, w, rstd Tensor[T], lo, hi, d int) {
	for r := lo; r < hi; r++ {
		xr, dyr, dxr := x.h[r*d:r*d+d], dy.h[r*d:r*d+d], dx.h[r*d:r*d+d]
		s := rstd.h[r]
		// Four chains, so the adds overlap (one chain was latency-bound: 4 cycles an element).
		var d0, d1, d2, d3 T
		i := 0
		for ; i+4 <= len(xr); i += 4 {
			d0 += dyr[i] * w.h[i] * xr[i]
			d1 += dyr[i+1] * w.h[i+1] * xr[i+1]
			d2 += dyr[i+2] * w.h[i+2] * xr[i+2]
			d3 += dyr[i+3] * w.h[i+3] * xr[i+3]
		}
		for ; i < len(xr); i++ {
			d0 += dyr[i] * w.h[i] * xr[i]
		}
		dot := (d0 + d1) + (d2 + d3)
		c := s * s * s * dot / T(d)
		for i := range xr {
			dxr[i] += s*dyr[i]*w.h[i] - c*xr[i]
		}
	}
}

// Rope implements Device.
func (*CPU[T]) Rope(x Tensor[T], pos Tensor[int32], heads int, rt *Rope, inverse bool) {
	spread(len(pos.h), rowGrain(heads*2*rt.Half), func(lo, hi int) { ropeRows(x, pos, lo, hi, heads, rt, inverse) })
}

// RopeQK implements Device.
func (*CPU[T]) RopeQK(q, k Tensor[T], pos Tensor[int32], qHeads, kHeads int, rt *Rope, inverse bool) {
	spread(len(pos.h), rowGrain((qHeads+kHeads)*2*rt.Half), func(lo, hi int) {
		ropeRows(q, pos, lo, hi, qHeads, rt, inverse)
		ropeRows(k, pos, lo, hi, kHeads, rt, inverse)
	})
}

// RopeQKV implements Device.
func (d *CPU[T]) RopeQKV(q, k, v, kc, vc Tensor[T], pos, slots Tensor[int32], qHeads, kHeads int, rt *Rope) {
	d.RopeQK(q, k, pos, qHeads, kHeads, rt, false)
	d.KVWrite(kc, k, slots, kHeads*2*rt.Half)
	d.KVWrite(vc, v, slots, kHeads*2*rt.Half)
}

func ropeRows[T Float](x Tensor[T], pos Tensor[int32], lo, hi, heads int, rt *Rope, inverse bool) {
	half := rt.Half
	hd := 2 * half
	for r := lo; r < hi; r++ {
		p := pos.h[r]
		cs := rt.Cos[int(p)*half : int(p+1)*half]
		sn := rt.Sin[int(p)*half : int(p+1)*half]
		for h := 0; h < heads; h++ {
			v := x.h[(r*heads+h)*hd : (r*heads+h+1)*hd]
			for i := 0; i < half; i++ {
				c, s := T(cs[i]), T(sn[i])
				if inverse {
					s = -s
				}
				a, b := v[i], v[i+half]
				v[i] = a*c - b*s
				v[i+half] = b*c + a*s
			}
		}
	}
}

// SwiGLU implements Device.
func (*CPU[T]) SwiGLU(a, g, u Tensor[T]) {
	spread(len(a.h), elemGrain, func(lo, hi int) {
		var e [expChunk]T
		for c := lo; c < hi; c += expChunk {
			gs := g.h[c:min(c+expChunk, hi)]
			us, as := u.h[c:c+len(gs)], a.h[c:c+len(gs)]
			kern.Exp(e[:len(gs)], gs, -1, 0)
			kern.SwiGLU(as, gs, us, e[:len(gs)])
		}
	})
}

// SwiGLUBack implements Device.
func (*CPU[T]) SwiGLUBack(dg, du, da, g, u Tensor[T]) {
	spread(len(da.h), elemGrain, func(lo, hi int) {
		var e [expChunk]T
		for c := lo; c < hi; c += expChunk {
			gs := g.h[c:min(c+expChunk, hi)]
			n := len(gs)
			us, ds, dgs, dus := u.h[c:c+n], da.h[c:c+n], dg.h[c:c+n], du.h[c:c+n]
			kern.Exp(e[:n], gs, -1, 0)
			kern.SwiGLUBack(dgs, dus, ds, gs, us, e[:n])
		}
	})
}

// keyRows maps a key position to its row in an Attn's K and V.
type keyRows struct {
	krow  int
	tab   []int32 // block table; nil: contiguous from krow
	shift uint    // log2(BlockLen)
	mask  int
}

func (kr keyRows) row(j int) int {
	if kr.tab == nil {
		return kr.krow + j
	}
	return int(kr.tab[j>>kr.shift])<<kr.shift | j&kr.mask
}

func seqKeys(l *Layout, s AttnSeq) keyRows {
	if s.Blocks == 0 {
		return keyRows{krow: s.KRow}
	}
	sh := uint(bits.TrailingZeros(uint(l.BlockLen)))
	return keyRows{tab: l.Tables[s.Table : s.Table+s.Blocks], shift: sh, mask: l.BlockLen - 1}
}

// Attention implements Device, in parallel over (sequence, head).
// Over contiguous keys without kept probabilities it runs blocked (attn_cpu.go), over
// paged ones blocked on gathered keys (cpu_attn.go), the same for a prompt's rows and a
// decode step's.
func (*CPU[T]) Attention(a *Attn[T]) {
	if blockedAttn(a) {
		attnForward(a)
		return
	}
	if pagedBlocked(a) {
		attnPaged(a)
		return
	}
	attnRows(a)
}

// attnRows is Attention one query row and one key at a time with the probabilities kept
// (in float64 exponentials, as the reference the blocked paths are tested against).
func attnRows[T Float](a *Attn[T]) {
	l := a.Layout
	hq, hkv, hd := a.Heads, a.KVHeads, a.HeadDim
	qd, kvd := hq*hd, hkv*hd
	group := hq / hkv
	q, k, v, o := a.Q.h, a.K.h, a.V.h, a.Out.h
	parallel(len(l.Seqs)*hq, func(job int) {
		s, h := l.Seqs[job/hq], job%hq
		kh := h / group
		kr := seqKeys(l, s)
		span := s.Pos + s.N
		for i := 0; i < s.N; i++ {
			qi := q[(s.Row+i)*qd+h*hd : (s.Row+i)*qd+h*hd+hd]
			off := s.POff + (h*s.N+i)*span
			pr := a.P.h[off : off+span]
			n := s.Pos + i + 1
			oi := o[(s.Row+i)*qd+h*hd : (s.Row+i)*qd+h*hd+hd]
			m := math.Inf(-1)
			for j := 0; j < n; j++ {
				r := kr.row(j)
				sc := kern.Dot(qi, k[r*kvd+kh*hd:r*kvd+kh*hd+hd]) * a.Scale
				pr[j] = sc
				if float64(sc) > m {
					m = float64(sc)
				}
			}
			var sum float64
			for j := 0; j < n; j++ {
				e := math.Exp(float64(pr[j]) - m)
				pr[j] = T(e)
				sum += e
			}
			clear(oi)
			for j := 0; j < n; j++ {
				r := kr.row(j)
				pr[j] = T(float64(pr[j]) / sum)
				kern.Axpy(pr[j], v[r*kvd+kh*hd:r*kvd+kh*hd+hd], oi)
			}
		}
	})
}

// AttentionBack implements Device. Heads sharing a KV head write the same dk/dv rows,
// so it runs in parallel over (sequence, KV head).
// With Stats it recomputes the probabilities blockwise (attn_cpu.go).
func (*CPU[T]) AttentionBack(a *Attn[T], dq, dk, dv, dout Tensor[T]) {
	if a.Stats {
		attnBackward(a, dq, dk, dv, dout)
		return
	}
	l := a.Layout
	hq, hkv, hd := a.Heads, a.KVHeads, a.HeadDim
	qd, kvd := hq*hd, hkv*hd
	group := hq / hkv
	q, k, v := a.Q.h, a.K.h, a.V.h
	parallel(len(l.Seqs)*hkv, func(job int) {
		s, kh := l.Seqs[job/hkv], job%hkv
		if s.Blocks != 0 {
			panic("device: AttentionBack over paged keys")
		}
		span := s.Pos + s.N
		P := a.P.h[s.POff : s.POff+hq*s.N*span]
		dp := make([]T, span)
		// The sums below accumulate; this job owns its sequence's rows of dq for the KV
		// head's query heads and of dk and dv for the KV head (AttentionBack overwrites).
		for i := 0; i < s.N; i++ {
			ro := (s.Row + i) * qd
			clear(dq.h[ro+kh*group*hd : ro+(kh+1)*group*hd])
		}
		for j := 0; j < span; j++ {
			r := (s.KRow + j) * kvd
			clear(dk.h[r+kh*hd : r+kh*hd+hd])
			clear(dv.h[r+kh*hd : r+kh*hd+hd])
		}
		for h := kh * group; h < (kh+1)*group; h++ {
			for i := 0; i < s.N; i++ {
				pr := P[(h*s.N+i)*span : (h*s.N+i)*span+span]
				ro := (s.Row + i) * qd
				doi := dout.h[ro+h*hd : ro+h*hd+hd]
				n := s.Pos + i + 1
				var rowDot T
				for j := 0; j < n; j++ {
					r := (s.KRow + j) * kvd
					dp[j] = kern.Dot(doi, v[r+kh*hd:r+kh*hd+hd])
					rowDot += dp[j] * pr[j]
					kern.Axpy(pr[j], doi, dv.h[r+kh*hd:r+kh*hd+hd])
				}
				qi := q[ro+h*hd : ro+h*hd+hd]
				dqi := dq.h[ro+h*hd : ro+h*hd+hd]
				for j := 0; j < n; j++ {
					r := (s.KRow + j) * kvd
					ds := pr[j] * (dp[j] - rowDot) * a.Scale
					kern.Axpy(ds, k[r+kh*hd:r+kh*hd+hd], dqi)
					kern.Axpy(ds, qi, dk.h[r+kh*hd:r+kh*hd+hd])
				}
			}
		}
	})
}

// KVWrite implements Device.
func (*CPU[T]) KVWrite(cache, rows Tensor[T], slots Tensor[int32], width int) {
	for i, s := range slots.h {
		copy(cache.h[int(s)*width:int(s+1)*width], rows.h[i*width:(i+1)*width])
	}
}

// LogSoftmax implements Device, in parallel over rows.
func (*CPU[T]) LogSoftmax(x Tensor[T], rows, cols int) {
	parallel(rows, func(i int) {
		r := x.h[i*cols : i*cols+cols]
		logSoftmaxRow(r, r)
	})
}

// logSoftmaxRow writes log-softmax of logits into out (may alias) using float64 sums.
func logSoftmaxRow[T Float](out, logits []T) {
	m := math.Inf(-1)
	for _, v := range logits {
		if float64(v) > m {
			m = float64(v)
		}
	}
	var e [expChunk]T
	var s float64
	for c := 0; c < len(logits); c += expChunk {
		part := e[:min(expChunk, len(logits)-c)]
		kern.Exp(part, logits[c:c+len(part)], 1, T(-m))
		s += sum64(part)
	}
	lse := T(m + math.Log(s))
	for i, v := range logits {
		out[i] = v - lse
	}
}

// Gather implements Device.
func (*CPU[T]) Gather(dst []T, x Tensor[T], idx []int64) {
	for i, j := range idx {
		dst[i] = x.h[j]
	}
}

// XentBack implements Device.
// dl may alias logp: each row is read before it is written.
func (*CPU[T]) XentBack(dl, logp Tensor[T], cols int, g *XentGrad) {
	spread(len(g.Rows), rowGrain(cols), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			r := g.Rows[i]
			row := dl.h[int(r)*cols : int(r+1)*cols]
			kern.Exp(row, logp.h[int(r)*cols:int(r+1)*cols], 1, 0)
			sum := T(-g.Sums[i])
			for v := range row {
				row[v] *= sum
			}
		}
	})
	for j, x := range g.Idx {
		dl.h[x] += T(g.Vals[j])
	}
}

// sumSquaresChunk is the elements per partial sum of SumSquares: a constant, so the sum
// is the same whatever the number of cores.
const sumSquaresChunk = 1 << 16

// SumSquares implements Device: partial sums (float64) of fixed chunks on every core,
// added in order. An optimizer step sums the adapter's gradients and state this way (20
// million values for a rank-16 adapter on SmolLM2's seven projections).
func (*CPU[T]) SumSquares(xs []Tensor[T]) float64 {
	type chunk struct{ x []T }
	var chunks []chunk
	for _, x := range xs {
		for lo := 0; lo < len(x.h); lo += sumSquaresChunk {
			chunks = append(chunks, chunk{x.h[lo:min(lo+sumSquaresChunk, len(x.h))]})
		}
	}
	part := make([]float64, len(chunks))
	parallel(len(chunks), func(i int) {
		var s0, s1 float64
		x := chunks[i].x
		j := 0
		for ; j+2 <= len(x); j += 2 {
			s0 += float64(x[j]) * float64(x[j])
			s1 += float64(x[j+1]) * float64(x[j+1])
		}
		for ; j < len(x); j++ {
			s0 += float64(x[j]) * float64(x[j])
		}
		part[i] = s0 + s1
	})
	var sq float64
	for _, p := range part {
		sq += p
	}
	return sq
}

// parallel runs f(i) for i in [0, n) on up to GOMAXPROCS goroutines.
func parallel(n int, f func(i int)) {
	w := kern.Procs()
	if w > n {
		w = n
	}
	if w <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	if kern.BurstShare(n, 1, func(_, i, _ int) { f(i) }) {
		return
	}
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for g := 0; g < w; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	wg.Wait()
}
