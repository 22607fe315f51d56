//go:build cuda && linux && (amd64 || arm64)

package cuda

import "github.com/tuft-go/tuft/engine/device"

// headChunkRows is the rows LossHead computes logits for at a time: its buffer is
// headChunkRows × V floats (32 MiB for a 32,000-token vocabulary), plus as many bfloat16
// values when W is narrowed (the probabilities cast for E = P·W), instead of the pass's
// rows × V; 256 rows keep cuBLAS's tiles full.
const headChunkRows = 256

// LossHead implements device.Device: per chunk of rows, the logits by one cuBLAS product
// into the chunk's buffer, head_softmax (log-sum-exp, the targets' log-probabilities and
// the probabilities in place), and E = P·W by a second product.
func (d *Device) LossHead(h *device.Head[float32]) {
	defer d.exit()
	if !d.enter() || h.Rows == 0 {
		return
	}
	D, V := h.D, h.V
	chunk := min(headChunkRows, h.Rows)
	p := d.get(uintptr(chunk*V)*4, false)
	if p == 0 {
		return
	}
	defer d.put(p)
	buf := device.OnDevice[float32](p, chunk*V, false)
	probs := 0
	if !h.E.Empty() {
		probs = 1
	}
	for r0 := 0; r0 < h.Rows && d.err == nil; r0 += chunk {
		n := min(chunk, h.Rows-r0)
		lg := buf.Slice(0, n*V)
		// lg = H·Wᵀ (MatMulNT's layout).
		d.gemm(cublasOpT, cublasOpN, V, n, D, h.W, D, h.H.Slice(r0*D, (r0+n)*D), D, lg, V, false)
		d.launch("head_softmax", n, 1, 256, pArg(lg), pArg(h.Off), pArg(h.Tok), pArg(h.LogP), iArg(V), iArg(r0), iArg(probs))
		if probs == 1 {
			// E = P·W (MatMulNN's layout).
			d.gemm(cublasOpN, cublasOpN, D, n, V, h.W, D, lg, V, h.E.Slice(r0*D, (r0+n)*D), D, false)
		}
	}
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
