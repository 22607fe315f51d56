//go:build cuda && linux && (amd64 || arm64)

package cuda

import "github.com/tuft-go/tuft/engine/device"

// headChunkRows is the rows LossHead computes logits for at a time: its buffer is
// headChunkRows × V floats (32 MiB for a 32,000-token vocabulary), plus as many bfloat16
// values when W is narrowed (the probabilities cast for E = P·W), instead of the pass's
// rows × V; 256 rows keep cuBLAS's tiles full.
const headChunkRows = 256

// The products of device.Device without its lock (the loss head's operations hold it).
func (d *Device) mmNT(c, a, b device.Tensor[float32], m, n, k int, acc bool) {
	d.gemm(cublasOpT, cublasOpN, n, m, k, b, k, a, k, c, n, acc)
}

func (d *Device) mmNN(c, a, b device.Tensor[float32], m, n, k int, acc bool) {
	d.gemm(cublasOpN, cublasOpN, n, m, k, b, n, a, k, c, n, acc)
}

func (d *Device) mmTN(c, a, b device.Tensor[float32], m, n, k int, acc bool) {
	d.gemm(cublasOpN, cublasOpT, n, m, k, b, n, a, m, c, n, acc)
}

// headChunks runs f over h's rows a chunk at a time, with the chunk's logits (the base
// product, then each LoRA run's Z·Bᵀ on its rows) in a buffer of the chunk's rows × V.
func (d *Device) headChunks(h *device.Head[float32], f func(lg device.Tensor[float32], r0, n int)) {
	D, V := h.D, h.V
	chunk := min(headChunkRows, h.Rows)
	p := d.get(uintptr(chunk*V)*4, false)
	if p == 0 {
		return
	}
	defer d.put(p)
	buf := device.OnDevice[float32](p, chunk*V, false)
	for r0 := 0; r0 < h.Rows && d.err == nil; r0 += chunk {
		n := min(chunk, h.Rows-r0)
		lg := buf.Slice(0, n*V)
		d.mmNT(lg, h.H.Slice(r0*D, (r0+n)*D), h.W, n, V, D, false)
		for k := range h.Lora {
			l := &h.Lora[k]
			if lo, hi := l.Overlap(r0, n); lo < hi {
				d.mmNT(lg.Slice((lo-r0)*V, (hi-r0)*V), l.Z.Slice((lo-l.Start)*l.R, (hi-l.Start)*l.R), l.B, hi-lo, V, l.R, true)
			}
		}
		f(lg, r0, n)
	}
}

// LossHead implements device.Device: per chunk of rows, the logits by cuBLAS into the
// chunk's buffer, head_softmax (log-sum-exp, the targets' log-probabilities and the
// probabilities in place), and E = P·W (and each LoRA run's F = P·B) by products.
func (d *Device) LossHead(h *device.Head[float32]) {
	defer d.exit()
	if !d.enter() || h.Rows == 0 {
		return
	}
	probs := 0
	if !h.E.Empty() {
		probs = 1
	}
	d.headChunks(h, func(lg device.Tensor[float32], r0, n int) {
		d.launch("head_softmax", n, 1, 256, pArg(lg), pArg(h.Off), pArg(h.Tok), pArg(h.LogP), pArg(h.LSE), iArg(h.V), iArg(r0), iArg(probs))
		if probs == 0 {
			return
		}
		d.mmNN(h.E.Slice(r0*h.D, (r0+n)*h.D), lg, h.W, n, h.D, h.V, false)
		for k := range h.Lora {
			l := &h.Lora[k]
			if lo, hi := l.Overlap(r0, n); lo < hi && !l.F.Empty() {
				d.mmNN(l.F.Slice((lo-l.Start)*l.R, (hi-l.Start)*l.R), lg.Slice((lo-r0)*h.V, (hi-r0)*h.V), l.B, hi-lo, l.R, h.V, false)
			}
		}
	})
}

// LossHeadBack implements device.Device: one block per row.
func (d *Device) LossHeadBack(h *device.Head[float32], dh, g device.Tensor[float32]) {
	defer d.exit()
	if !d.enter() || h.Rows == 0 {
		return
	}
	k := "head_back_f32"
	if h.W.BF16() {
		k = "head_back_bf16"
	}
	d.launch(k, h.Rows, 1, 256, pArg(dh), pArg(h.E), pArg(h.W), pArg(h.Off), pArg(h.Tok), pArg(g), iArg(h.D))
}

// LossHeadLoraGrad implements device.Device: per chunk, the logits again, head_dlogits in
// place, and DB += dL/dlogitsᵀ·Z for each run's rows in the chunk.
func (d *Device) LossHeadLoraGrad(h *device.Head[float32], g device.Tensor[float32]) {
	defer d.exit()
	if !d.enter() || h.Rows == 0 {
		return
	}
	d.headChunks(h, func(lg device.Tensor[float32], r0, n int) {
		d.launch("head_dlogits", n, 1, 256, pArg(lg), pArg(h.Off), pArg(h.Tok), pArg(g), pArg(h.LSE), iArg(h.V), iArg(r0))
		for k := range h.Lora {
			l := &h.Lora[k]
			if lo, hi := l.Overlap(r0, n); lo < hi && !l.DB.Empty() {
				d.mmTN(l.DB, lg.Slice((lo-r0)*h.V, (hi-r0)*h.V), l.Z.Slice((lo-l.Start)*l.R, (hi-l.Start)*l.R), h.V, l.R, hi-lo, true)
			}
		}
	})
}
