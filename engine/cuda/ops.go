//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/tuft-go/tuft/engine/device"
)

// The compute operations of device.Device, each queued as a kernel launch (or a cuBLAS
// call) on the compute stream.

// gemm is cuBLAS's column-major C[m×n] (+)= op(A)·op(B) with leading dimensions. A row-major
// product C = X·Y is the column-major Cᵀ = Yᵀ·Xᵀ, so the callers swap the operands.
// A may be bfloat16 (a weight); B (the activation) then is multiplied in bfloat16 too:
// its attached bfloat16 operand or itself if it is one (device.BF16Operands), else its
// rounding by a cast launch. A bfloat16 B with a float32 A is refused.
func (d *Device) gemm(ta, tb int, m, n, k int, a device.Tensor[float32], lda int, b device.Tensor[float32], ldb int, c device.Tensor[float32], ldc int, acc bool) {
	if d.err != nil || m == 0 || n == 0 {
		return
	}
	var cast uintptr
	if a.BF16() && k > 0 {
		if cast = d.castBF16(b); cast == 0 {
			return
		}
	}
	d.gemmCast(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, acc, cast)
}

// castBF16 returns the address of the activation b's bfloat16 operand: b itself if it is
// one, its attached operand (device.BF16Operands), else its rounding into the device's
// cast buffer by a cast launch (0 after an error, which d remembers).
func (d *Device) castBF16(b device.Tensor[float32]) uintptr {
	switch {
	case b.BF16():
		return b.Ptr()
	case b.BF16Twin() != 0:
		return b.BF16Twin()
	}
	nb := uintptr(b.Len())
	if nb > d.castN {
		if d.gmode != eager {
			d.graphBad("a larger bfloat16 cast buffer")
			return 0
		}
		if len(d.graphs) > 0 {
			d.retired = append(d.retired, d.cast) // a graph's products name it
		} else {
			d.put(d.cast)
		}
		d.castN = uintptr(1) << bits.Len64(uint64(nb))
		if d.cast = d.get(d.castN*2, false); d.cast == 0 {
			d.castN = 0
			return 0
		}
	}
	d.launch("cast_bf16", d.stride(int(nb)), 1, 256, pArg(b), uint64(d.cast), lArg(int(nb)))
	if d.err != nil {
		return 0
	}
	return d.cast
}

// gemvWarps is kernels.cu's GEMV_WARPS.
const gemvWarps = 8

// gemmCast is gemm with b already cast to bfloat16 at cast when a is a bfloat16 weight.
func (d *Device) gemmCast(ta, tb int, m, n, k int, a device.Tensor[float32], lda int, b device.Tensor[float32], ldb int, c device.Tensor[float32], ldc int, acc bool, cast uintptr) {
	if d.err != nil || m == 0 || n == 0 {
		return
	}
	if k == 0 {
		if !acc {
			d.memset(c.Ptr(), uintptr(m*n)*4)
		}
		return
	}
	if b.BF16() && !a.BF16() {
		d.fail(errors.New("cuda: a product of a bfloat16 activation with a float32 matrix (bfloat16 activations go with bfloat16 weights)"))
		return
	}
	// One row of activations (a batch-1 decoding step) by a bfloat16 weight: gemv_bf16,
	// where the rows and the operand allow 16-byte loads.
	if d.gemv && a.BF16() && ta == cublasOpT && tb == cublasOpN && n == 1 && k%8 == 0 && lda == k && (a.Ptr()|cast)%16 == 0 {
		accArg := 0
		if acc {
			accArg = 1
		}
		d.launch("gemv_bf16", (m+gemvWarps-1)/gemvWarps, 1, 32*gemvWarps, pArg(c), pArg(a), uint64(cast), iArg(m), iArg(k), iArg(accArg))
		return
	}
	at, bt, bp := uintptr(cudaR32F), uintptr(cudaR32F), b.Ptr()
	if a.BF16() {
		at, bt, bp = cudaR16BF, cudaR16BF, cast
	}
	d.alpha, d.beta = 1, 0
	if acc {
		d.beta = 1
	}
	if !d.record(opGemm, uint64(ta), uint64(tb), uint64(m), uint64(n), uint64(k), uint64(a.Ptr()), uint64(at), uint64(lda),
		uint64(bp), uint64(ldb), uint64(c.Ptr()), uint64(ldc), uint64(d.beta)) {
		return
	}
	d.launches++
	r := call(d.blas.gemmEx, d.handle, uintptr(ta), uintptr(tb), uintptr(m), uintptr(n), uintptr(k),
		uintptr(unsafe.Pointer(&d.alpha)), a.Ptr(), at, uintptr(lda), bp, bt, uintptr(ldb),
		uintptr(unsafe.Pointer(&d.beta)), c.Ptr(), cudaR32F, uintptr(ldc), cublasCompute32F, uintptr(uint32(cublasGemmDefault&0xffffffff)))
	if r != 0 {
		d.fail(fmt.Errorf("cublasGemmEx(%d×%d×%d): status %d", m, n, k, r))
	}
}

// wide fails unless every tensor holds float32 values: the operations other than
// device.BF16Operands' outputs and the products read float32 activations only.
func (d *Device) wide(op string, ts ...device.Tensor[float32]) bool {
	for _, t := range ts {
		if t.BF16() {
			return d.fail(fmt.Errorf("cuda: %s of a bfloat16 tensor (it reads and writes float32)", op))
		}
	}
	return true
}

// outs is an output's float32 and bfloat16 addresses, each 0 where it is not to be
// written (device.BF16Operands).
func outs(t device.Tensor[float32]) (f32, b16 uint64) {
	if t.BF16() {
		return 0, uint64(t.Ptr())
	}
	return uint64(t.Ptr()), uint64(t.BF16Twin())
}

// MatMulNT implements device.Device: C = A·Bᵀ is Cᵀ = B·Aᵀ.
func (d *Device) MatMulNT(c, a, b device.Tensor[float32], m, n, k int, acc bool) {
	defer d.exit()
	if d.enter() {
		d.gemm(cublasOpT, cublasOpN, n, m, k, b, k, a, k, c, n, acc)
	}
}

// MatMulNTShared implements device.Device: the activation is cast to bfloat16 once for
// every bfloat16 weight, then each output is one cuBLAS product, the one MatMulNT
// would run.
func (d *Device) MatMulNTShared(a device.Tensor[float32], outs []device.SharedOut[float32], m, k int) {
	defer d.exit()
	if !d.enter() {
		return
	}
	var cast uintptr
	for _, o := range outs {
		if o.W.BF16() && cast == 0 && m > 0 && k > 0 && o.N > 0 {
			if cast = d.castBF16(a); cast == 0 {
				return
			}
		}
		d.gemmCast(cublasOpT, cublasOpN, o.N, m, k, o.W, k, a, k, o.C, o.N, false, cast)
	}
}

// MatMulNN implements device.Device: C = A·B is Cᵀ = Bᵀ·Aᵀ.
func (d *Device) MatMulNN(c, a, b device.Tensor[float32], m, n, k int, acc bool) {
	defer d.exit()
	if d.enter() {
		d.gemm(cublasOpN, cublasOpN, n, m, k, b, n, a, k, c, n, acc)
	}
}

// MatMulTN implements device.Device: C = Aᵀ·B is Cᵀ = Bᵀ·A.
func (d *Device) MatMulTN(c, a, b device.Tensor[float32], m, n, k int, acc bool) {
	defer d.exit()
	if d.enter() {
		d.gemm(cublasOpN, cublasOpT, n, m, k, b, n, a, m, c, n, acc)
	}
}

// Add implements device.Device.
func (d *Device) Add(out, a, b device.Tensor[float32]) {
	defer d.exit()
	if d.enter() && d.wide("Add", out, a, b) {
		d.launch("add", d.stride(out.Len()), 1, 256, pArg(out), pArg(a), pArg(b), lArg(out.Len()))
	}
}

// Scale implements device.Device.
func (d *Device) Scale(x device.Tensor[float32], s float32) {
	defer d.exit()
	if d.enter() && d.wide("Scale", x) {
		d.launch("scale", d.stride(x.Len()), 1, 256, pArg(x), fArg(s), lArg(x.Len()))
	}
}

// AddRows implements device.Device.
func (d *Device) AddRows(y, b device.Tensor[float32], rows int) {
	defer d.exit()
	if d.enter() && d.wide("AddRows", y, b) {
		d.launch("add_rows", d.stride(rows*b.Len()), 1, 256, pArg(y), pArg(b), lArg(rows), iArg(b.Len()))
	}
}

// Embed implements device.Device.
func (d *Device) Embed(x, table device.Tensor[float32], idx device.Tensor[int32], dim int) {
	defer d.exit()
	if !d.enter() {
		return
	}
	k := "embed_f32"
	if table.BF16() {
		k = "embed_bf16"
	}
	d.launch(k, idx.Len(), 1, 256, pArg(x), pArg(table), pArg(idx), iArg(dim))
}

// RMSNorm implements device.Device: add_rmsnorm without the add; y may have a bfloat16
// operand or be one (device.BF16Operands).
func (d *Device) RMSNorm(y, rstd, x, w device.Tensor[float32], rows, dim int, eps float64) {
	defer d.exit()
	if d.enter() && d.wide("RMSNorm", rstd, x) {
		yf, yb := outs(y)
		d.launch("add_rmsnorm", rows, 1, 256, 0, yf, yb, pArg(rstd), pArg(x), 0, pArg(w), iArg(dim), dArg(eps))
	}
}

// AddRMSNorm implements device.Device: one block per row; y as for RMSNorm.
func (d *Device) AddRMSNorm(sum, y, rstd, a, b, w device.Tensor[float32], rows, dim int, eps float64) {
	defer d.exit()
	if d.enter() && d.wide("AddRMSNorm", sum, rstd, a, b) {
		yf, yb := outs(y)
		d.launch("add_rmsnorm", rows, 1, 256, pArg(sum), yf, yb, pArg(rstd), pArg(a), pArg(b), pArg(w), iArg(dim), dArg(eps))
	}
}

// RMSNormBack implements device.Device; dx may have a bfloat16 operand attached
// (device.BF16Operands).
func (d *Device) RMSNormBack(dx, dy, x, w, rstd device.Tensor[float32], rows, dim int) {
	defer d.exit()
	if d.enter() && d.wide("RMSNormBack", dx, dy, x) {
		d.launch("rmsnorm_back", rows, 1, 256, pArg(dx), uint64(dx.BF16Twin()), pArg(dy), pArg(x), pArg(w), pArg(rstd), iArg(dim))
	}
}

// rope returns the device copy of RoPE tables (float32), made on first use.
func (d *Device) rope(r *device.Rope) [2]uintptr {
	if t, ok := d.ropes[r]; ok {
		return t
	}
	if d.gmode != eager { // the tables outlive any graph: made by an eager step first
		d.graphBad("RoPE tables not yet on the device")
		return [2]uintptr{}
	}
	c, s := make([]float32, len(r.Cos)), make([]float32, len(r.Sin))
	for i := range c {
		c[i], s[i] = float32(r.Cos[i]), float32(r.Sin[i])
	}
	t := [2]uintptr{uploadSlice(d, c), uploadSlice(d, s)}
	if d.err == nil {
		d.ropes[r] = t
	}
	return t
}

// Rope implements device.Device: rope_qk with Q's heads alone.
func (d *Device) Rope(x device.Tensor[float32], pos device.Tensor[int32], heads int, r *device.Rope, inverse bool) {
	d.RopeQK(x, device.Tensor[float32]{}, pos, heads, 0, r, inverse)
}

// RopeQK implements device.Device: one launch over the heads of both, which may have
// bfloat16 operands attached (device.BF16Operands).
func (d *Device) RopeQK(q, k device.Tensor[float32], pos device.Tensor[int32], qHeads, kHeads int, r *device.Rope, inverse bool) {
	defer d.exit()
	if !d.enter() || !d.wide("Rope", q, k) {
		return
	}
	t := d.rope(r)
	inv := 0
	if inverse {
		inv = 1
	}
	rows := pos.Len()
	d.launch("rope_qk", d.stride(rows*(qHeads+kHeads)*r.Half), 1, 256, pArg(q), uint64(q.BF16Twin()), pArg(k), uint64(k.BF16Twin()),
		0, 0, 0, 0, pArg(pos), uint64(t[0]), uint64(t[1]),
		lArg(rows), iArg(qHeads), iArg(kHeads), iArg(r.Half), iArg(inv))
}

// RopeQKV implements device.Device: rope_qk writing the caches too.
func (d *Device) RopeQKV(q, k, v, kc, vc device.Tensor[float32], pos, slots device.Tensor[int32], qHeads, kHeads int, r *device.Rope) {
	defer d.exit()
	if !d.enter() || !d.wide("RopeQKV", q, k, v, kc, vc) {
		return
	}
	t := d.rope(r)
	rows := pos.Len()
	d.launch("rope_qk", d.stride(rows*(qHeads+kHeads)*r.Half), 1, 256, pArg(q), uint64(q.BF16Twin()), pArg(k), uint64(k.BF16Twin()),
		pArg(v), pArg(kc), pArg(vc), pArg(slots), pArg(pos), uint64(t[0]), uint64(t[1]),
		lArg(rows), iArg(qHeads), iArg(kHeads), iArg(r.Half), iArg(0))
}

// SwiGLU implements device.Device; a may have a bfloat16 operand or be one
// (device.BF16Operands).
func (d *Device) SwiGLU(a, g, u device.Tensor[float32]) {
	defer d.exit()
	if d.enter() && d.wide("SwiGLU", g, u) {
		af, ab := outs(a)
		d.launch("swiglu", d.stride(a.Len()), 1, 256, af, ab, pArg(g), pArg(u), lArg(a.Len()))
	}
}

// SwiGLUBack implements device.Device; dg and du may have bfloat16 operands attached
// (device.BF16Operands).
func (d *Device) SwiGLUBack(dg, du, da, g, u device.Tensor[float32]) {
	defer d.exit()
	if d.enter() && d.wide("SwiGLUBack", dg, du, da, g, u) {
		d.launch("swiglu_back", d.stride(da.Len()), 1, 256, pArg(dg), uint64(dg.BF16Twin()), pArg(du), uint64(du.BF16Twin()),
			pArg(da), pArg(g), pArg(u), lArg(da.Len()))
	}
}

func (d *Device) checkAttn(a *device.Attn[float32]) bool {
	switch {
	case !d.wide("Attention", a.Q, a.K, a.V, a.P):
		return false
	case a.HeadDim > 256:
		return d.fail(fmt.Errorf("cuda: head_dim %d is above the kernels' 256", a.HeadDim))
	case a.Layout.Desc.Empty() && len(a.Layout.Seqs) > 0:
		return d.fail(errors.New("cuda: attention layout was not uploaded"))
	}
	return true
}

// KeepsAttnStats implements device.StatsKeeper: a device with bfloat16 runs attention as
// the tiled kernels (flash_*), which keep each row's log-sum-exp instead of the
// probabilities (asked for probabilities, it runs the float32 kernels). With float32 weights (or before compute capability 8.0) attention stays
// float32, one block per (row, head), and keeps the probabilities.
func (d *Device) KeepsAttnStats() bool { return d.bf16 }

// flashVariant is the suffix of the tiled kernels compiled for a's head_dim (rounded up
// to 64, 128 or 256).
func flashVariant(hd int) string {
	switch {
	case hd <= 64:
		return "64"
	case hd <= 128:
		return "128"
	}
	return "256"
}

// flashTiles is the number of FA_BM-row tiles (kernels.cu) the tiled kernels' grid has:
// each sequence's rows, in tiles of their own.
func flashTiles(l *device.Layout) int {
	const bm = 64 // FA_BM
	n := 0
	for _, s := range l.Seqs {
		n += (s.N + bm - 1) / bm
	}
	return n
}

// Attention implements device.Device.
func (d *Device) Attention(a *device.Attn[float32]) {
	defer d.exit()
	if !d.enter() || !d.checkAttn(a) {
		return
	}
	shift := 0
	if a.Layout.BlockLen > 0 {
		shift = bits.TrailingZeros(uint(a.Layout.BlockLen))
	}
	// Every pass without probabilities runs tiled, decoding steps too, so that sampling
	// and training see attention of the same precision (a sampled token's logprob is the
	// teacher-forced one, up to summation order).
	if d.bf16 && (a.Stats || a.P.Empty()) {
		var lse uint64
		if a.Stats {
			lse = pArg(a.P)
		}
		of, ob := outs(a.Out)
		d.launch("flash_fwd_"+flashVariant(a.HeadDim), flashTiles(a.Layout), a.Heads, 128, pArg(a.Q), of, ob, lse,
			pArg(a.K), pArg(a.V), pArg(a.Layout.Desc), iArg(len(a.Layout.Seqs)), pArg(a.Layout.Tab), iArg(shift),
			iArg(a.Heads), iArg(a.KVHeads), iArg(a.HeadDim), fArg(a.Scale))
		return
	}
	if a.Stats {
		d.fail(errors.New("cuda: attention statistics asked of a device that keeps probabilities"))
		return
	}
	if a.Out.BF16() {
		d.fail(errors.New("cuda: float32 attention (probabilities kept) into a bfloat16 output alone"))
		return
	}
	rows := a.Q.Len() / (a.Heads * a.HeadDim)
	d.launch("attention", rows, a.Heads, 128, pArg(a.Q), pArg(a.Out), pArg(a.K), pArg(a.V), pArg(a.P),
		pArg(a.Layout.Desc), iArg(len(a.Layout.Seqs)), pArg(a.Layout.Tab), iArg(shift),
		iArg(a.Heads), iArg(a.KVHeads), iArg(a.HeadDim), fArg(a.Scale))
	if tw := a.Out.BF16Twin(); tw != 0 {
		d.launch("cast_bf16", d.stride(a.Out.Len()), 1, 256, pArg(a.Out), uint64(tw), lArg(a.Out.Len()))
	}
}

// AttentionBack implements device.Device, for training passes: every sequence's keys are
// its own rows, from position 0. dv may have a bfloat16 operand attached
// (device.BF16Operands).
func (d *Device) AttentionBack(a *device.Attn[float32], dq, dk, dv, dout device.Tensor[float32]) {
	defer d.exit()
	if !d.enter() || !d.checkAttn(a) {
		return
	}
	for _, s := range a.Layout.Seqs {
		if s.Blocks != 0 || s.Pos != 0 || s.KRow != s.Row {
			d.fail(errors.New("cuda: attention backward needs each sequence's own keys from position 0"))
			return
		}
	}
	if a.Stats {
		if !d.bf16 {
			d.fail(errors.New("cuda: attention statistics asked of a device that keeps probabilities"))
			return
		}
		// Rows outside every sequence get zeros, as on the CPU; the kernels overwrite the
		// rest (dv's bfloat16 operand too: flash_bwd_kv writes it).
		for _, t := range []device.Tensor[float32]{dq, dk, dv} {
			d.memset(t.Ptr(), uintptr(t.Len())*4)
		}
		if tw := dv.BF16Twin(); tw != 0 {
			d.memset(tw, uintptr(dv.Len())*2)
		}
		// D holds each row's Σ P∘dP per head, for flash_bwd_kv: Σ dO∘O from attn_rowdot
		// where the forward's output is given, else flash_bwd_dq's first sweep over the
		// keys (recomputing P and dP: about 40 % of its work).
		dsum := d.get(uintptr(a.P.Len())*4, false)
		defer d.put(dsum)
		haveD := 0
		if o := a.Out; o.Ptr() != 0 && !o.BF16() && o.Len() == a.Q.Len() {
			d.launch("attn_rowdot", a.Q.Len()/(a.Heads*a.HeadDim), a.Heads, 32, uint64(dsum), pArg(dout), pArg(o), iArg(a.Heads), iArg(a.HeadDim))
			haveD = 1
		}
		v, tiles := flashVariant(a.HeadDim), flashTiles(a.Layout)
		d.launch("flash_bwd_dq_"+v, tiles, a.Heads, 128, pArg(dq), uint64(dsum), pArg(dout), pArg(a.Q), pArg(a.K), pArg(a.V),
			pArg(a.P), pArg(a.Layout.Desc), iArg(len(a.Layout.Seqs)), iArg(a.Heads), iArg(a.KVHeads), iArg(a.HeadDim), fArg(a.Scale), iArg(haveD))
		d.launch("flash_bwd_kv_"+v, tiles, a.KVHeads, 128, pArg(dk), pArg(dv), uint64(dv.BF16Twin()), uint64(dsum), pArg(dout), pArg(a.Q), pArg(a.K), pArg(a.V),
			pArg(a.P), pArg(a.Layout.Desc), iArg(len(a.Layout.Seqs)), iArg(a.Heads), iArg(a.KVHeads), iArg(a.HeadDim), fArg(a.Scale))
		return
	}
	ds := device.OnDevice[float32](d.get(uintptr(a.P.Len())*4, false), a.P.Len(), false)
	defer d.put(ds.Ptr())
	rows := a.Q.Len() / (a.Heads * a.HeadDim)
	d.launch("attn_back_q", rows, a.Heads, 128, pArg(dq), pArg(ds), pArg(dout), pArg(a.Q), pArg(a.K), pArg(a.V), pArg(a.P),
		pArg(a.Layout.Desc), iArg(len(a.Layout.Seqs)), iArg(a.Heads), iArg(a.KVHeads), iArg(a.HeadDim), fArg(a.Scale))
	d.launch("attn_back_kv", rows, a.KVHeads, min(256, (a.HeadDim+31)/32*32), pArg(dk), pArg(dv), pArg(ds), pArg(a.P), pArg(dout), pArg(a.Q),
		pArg(a.Layout.Desc), iArg(len(a.Layout.Seqs)), iArg(a.Heads), iArg(a.KVHeads), iArg(a.HeadDim))
	if tw := dv.BF16Twin(); tw != 0 {
		d.launch("cast_bf16", d.stride(dv.Len()), 1, 256, pArg(dv), uint64(tw), lArg(dv.Len()))
	}
}

// KVWrite implements device.Device.
func (d *Device) KVWrite(cache, rows device.Tensor[float32], slots device.Tensor[int32], width int) {
	defer d.exit()
	if d.enter() && d.wide("KVWrite", cache, rows) {
		d.launch("kv_write", d.stride(slots.Len()*width), 1, 256, pArg(cache), pArg(rows), pArg(slots), lArg(slots.Len()), iArg(width))
	}
}

// LogSoftmax implements device.Device.
func (d *Device) LogSoftmax(x device.Tensor[float32], rows, cols int) {
	defer d.exit()
	if d.enter() {
		d.launch("log_softmax", rows, 1, 256, pArg(x), iArg(cols))
	}
}

// Gather implements device.Device.
func (d *Device) Gather(dst []float32, x device.Tensor[float32], idx []int64) {
	defer d.exit()
	if !d.enter() || len(idx) == 0 {
		return
	}
	ip := uploadSlice(d, idx)
	out := d.get(uintptr(len(idx))*4, false)
	d.launch("gather", d.stride(len(idx)), 1, 256, uint64(out), pArg(x), uint64(ip), lArg(len(idx)))
	downloadSlice(d, dst, out)
	d.put(ip)
	d.put(out)
}

// XentBack implements device.Device.
func (d *Device) XentBack(dl, logp device.Tensor[float32], cols int, g *device.XentGrad) {
	defer d.exit()
	if !d.enter() {
		return
	}
	if len(g.Rows) > 0 {
		rp, sp := uploadSlice(d, g.Rows), uploadSlice(d, g.Sums)
		d.launch("xent_fill", len(g.Rows), 1, 256, pArg(dl), pArg(logp), uint64(rp), uint64(sp), iArg(cols))
		d.put(rp)
		d.put(sp)
	}
	if len(g.Idx) > 0 {
		ip, vp := uploadSlice(d, g.Idx), uploadSlice(d, g.Vals)
		d.launch("scatter_add", d.stride(len(g.Idx)), 1, 256, pArg(dl), uint64(ip), uint64(vp), lArg(len(g.Idx)))
		d.put(ip)
		d.put(vp)
	}
}

// Sample implements device.Device.
func (d *Device) Sample(logits device.Tensor[float32], cols int, draws []device.Draw) ([]int32, []float32) {
	toks, lps := make([]int32, len(draws)), make([]float32, len(draws))
	defer d.exit()
	if !d.enter() || len(draws) == 0 {
		return toks, lps
	}
	// One upload of the draws' parameters (three float64 arrays, then two int32 ones) and
	// one download of the tokens and log-probabilities: each transfer is a copy and two
	// event waits on the streams (stream.go).
	n := len(draws)
	in := make([]uint64, 4*n)
	for i, dr := range draws {
		in[i], in[n+i], in[2*n+i] = math.Float64bits(dr.Temperature), math.Float64bits(dr.TopP), math.Float64bits(dr.U)
		in[3*n+i/2] |= uint64(uint32(int32(dr.Row))) << (32 * (i % 2))
		in[3*n+(n+i)/2] |= uint64(uint32(int32(dr.TopK))) << (32 * ((n + i) % 2))
	}
	buf := uploadSlice(d, in)
	out := d.get(uintptr(n)*8, false)
	ints := uint64(buf) + uint64(24*n)
	d.launch("sample", n, 1, 256, pArg(logits), iArg(cols), ints, uint64(buf), ints+uint64(4*n),
		uint64(buf)+uint64(8*n), uint64(buf)+uint64(16*n), uint64(out), uint64(out)+uint64(4*n))
	res := make([]uint32, 2*n)
	downloadSlice(d, res, out)
	for i := range n {
		toks[i], lps[i] = int32(res[i]), math.Float32frombits(res[n+i])
	}
	d.put(buf)
	d.put(out)
	return toks, lps
}

// TopK implements device.Device.
func (d *Device) TopK(logp device.Tensor[float32], cols int, rows []int32, k int) ([]int32, []float32) {
	k = min(k, cols)
	toks, vals := make([]int32, len(rows)*k), make([]float32, len(rows)*k)
	defer d.exit()
	if !d.enter() || len(rows) == 0 || k == 0 {
		return toks, vals
	}
	rp := uploadSlice(d, rows)
	tp, vp := d.get(uintptr(len(toks))*4, false), d.get(uintptr(len(vals))*4, false)
	d.launch("topk", len(rows), 1, 256, pArg(logp), iArg(cols), uint64(rp), iArg(k), uint64(tp), uint64(vp))
	downloadSlice(d, toks, tp)
	downloadSlice(d, vals, vp)
	d.put(rp)
	d.put(tp)
	d.put(vp)
	return toks, vals
}
