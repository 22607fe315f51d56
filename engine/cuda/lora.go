//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"math"

	"github.com/tuft-go/tuft/engine/device"
)

// The grouped LoRA products of device.LoraOps (Punica's SGMV): every run of every adapter
// in one launch per stage (kernels.cu's lora_* kernels), where the per-run path made two
// cuBLAS calls per run and projection forward and four backward.

// loraFields and loraTile are kernels.cu's LORA_FIELDS and LORA_TILE.
const (
	loraFields = 10
	loraTile   = 32
	loraSplit  = 256 // kernels.cu's LORA_SPLIT
)

// loraPlan is what one grouped call uploads: the runs (loraFields int64 each), then the
// row tiles (run, first row), then, for the backward pass, the lists of runs whose
// gradients each lora_grad launch accumulates.
type loraPlan struct {
	buf     []int64
	tiles   int   // row tiles
	maxRank int   // largest rank
	waves   []int // offsets in buf of each gradient launch's list; the last ends at len(buf)
	counts  []int // runs in each list
}

// loraPlanOf lays out runs with dz (the backward pass's scratch; empty in the forward).
func loraPlanOf(runs []device.LoraRun[float32], dz device.Tensor[float32], backward bool) (*loraPlan, error) {
	p := &loraPlan{buf: make([]int64, 0, len(runs)*(loraFields+4))}
	off := 0
	for i := range runs {
		r := &runs[i]
		if r.A.BF16() || r.B.BF16() || r.Z.BF16() || r.GA.BF16() || r.GB.BF16() {
			return nil, errors.New("cuda: a LoRA operand is bfloat16 (adapters are float32)")
		}
		if r.Grad() != !r.GB.Empty() {
			return nil, errors.New("cuda: a LoRA run has one of its two gradients")
		}
		var dzp int64
		if backward {
			dzp = int64(dz.Ptr()) + int64(off)*4
			off += r.N * r.Rank
		}
		p.buf = append(p.buf, int64(r.Row), int64(r.N), int64(r.Rank), int64(r.A.Ptr()), int64(r.B.Ptr()),
			int64(r.Z.Ptr()), int64(r.GA.Ptr()), int64(r.GB.Ptr()), dzp, int64(math.Float32bits(r.Scale)))
		p.maxRank = max(p.maxRank, r.Rank)
	}
	for i := range runs {
		for r0 := 0; r0 < runs[i].N; r0 += loraTile {
			p.buf = append(p.buf, int64(i), int64(r0))
			p.tiles++
		}
	}
	if backward {
		// Runs that share gradient tensors go to successive launches, in run order.
		groups := device.GradGroups(runs)
		for w := 0; ; w++ {
			start, n := len(p.buf), 0
			for _, g := range groups {
				if w < len(g) {
					p.buf = append(p.buf, int64(g[w]))
					n++
				}
			}
			if n == 0 {
				break
			}
			p.waves, p.counts = append(p.waves, start), append(p.counts, n)
		}
	}
	return p, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// LoraForward implements device.LoraOps: lora_shrink (Z for every run) then lora_expand
// (every run's rows of y), one launch each. A single run (one adapter) goes to cuBLAS as
// before: its products are large enough for cuBLAS's tuned kernels (split-k among them),
// which the grouped kernels' one-block-per-32×32-tile grid does not match at 7B sizes.
func (d *Device) LoraForward(y, x device.Tensor[float32], runs []device.LoraRun[float32], in, out int) {
	defer d.exit()
	if !d.enter() || len(runs) == 0 {
		return
	}
	p, err := loraPlanOf(runs, device.Tensor[float32]{}, false)
	if !d.fail(err) || p.tiles == 0 {
		return
	}
	if len(runs) == 1 {
		r := &runs[0]
		xs, ys := x.Slice(r.Row*in, (r.Row+r.N)*in), y.Slice(r.Row*out, (r.Row+r.N)*out)
		d.gemm(cublasOpT, cublasOpN, r.Rank, r.N, in, r.A, in, xs, in, r.Z, r.Rank, false) // Z = X·Aᵀ
		d.launch("scale", d.stride(r.Z.Len()), 1, 256, pArg(r.Z), fArg(r.Scale), lArg(r.Z.Len()))
		d.gemm(cublasOpT, cublasOpN, out, r.N, r.Rank, r.B, r.Rank, r.Z, r.Rank, ys, out, true) // Y += Z·Bᵀ
		return
	}
	buf := uploadSlice(d, p.buf)
	tiles := uint64(buf) + uint64(len(runs)*loraFields*8)
	d.splitLaunch("lora_shrink", 5, p, buf, tiles, pArg(x), in)
	d.launch("lora_expand", p.tiles, ceilDiv(out, loraTile), 256, uint64(buf), tiles, pArg(y), iArg(out))
	d.put(buf)
}

// LoraBackward implements device.LoraOps: lora_back_dz, lora_back_dx (with dx) and
// lora_grad (one launch per depth of runs sharing gradients, normally one).
func (d *Device) LoraBackward(dx, dy, x, dz device.Tensor[float32], runs []device.LoraRun[float32], in, out int) {
	defer d.exit()
	if !d.enter() || len(runs) == 0 {
		return
	}
	p, err := loraPlanOf(runs, dz, true)
	if !d.fail(err) || p.tiles == 0 {
		return
	}
	if len(runs) == 1 { // cuBLAS, as LoraForward
		r := &runs[0]
		xs, dys := x.Slice(r.Row*in, (r.Row+r.N)*in), dy.Slice(r.Row*out, (r.Row+r.N)*out)
		dzr := dz.Slice(0, r.N*r.Rank)
		d.gemm(cublasOpN, cublasOpN, r.Rank, r.N, out, r.B, r.Rank, dys, out, dzr, r.Rank, false) // dZ = dY·B
		d.launch("scale", d.stride(dzr.Len()), 1, 256, pArg(dzr), fArg(r.Scale), lArg(dzr.Len()))
		if r.Grad() {
			d.gemm(cublasOpN, cublasOpT, r.Rank, out, r.N, r.Z, r.Rank, dys, out, r.GB, r.Rank, true) // GB += dYᵀ·Z
			d.gemm(cublasOpN, cublasOpT, in, r.Rank, r.N, xs, in, dzr, r.Rank, r.GA, in, true)        // GA += dZᵀ·X
		}
		if !dx.Empty() {
			d.gemm(cublasOpN, cublasOpN, in, r.N, r.Rank, r.A, in, dzr, r.Rank, dx.Slice(r.Row*in, (r.Row+r.N)*in), in, true) // dX += dZ·A
		}
		return
	}
	buf := uploadSlice(d, p.buf)
	tiles := uint64(buf) + uint64(len(runs)*loraFields*8)
	d.splitLaunch("lora_back_dz", 8, p, buf, tiles, pArg(dy), out)
	if !dx.Empty() {
		d.launch("lora_back_dx", p.tiles, ceilDiv(in, loraTile), 256, uint64(buf), tiles, pArg(dx), iArg(in))
	}
	rt := ceilDiv(p.maxRank, loraTile)
	gy := ceilDiv(out, loraTile)*rt + rt*ceilDiv(in, loraTile)
	for w, off := range p.waves {
		d.launch("lora_grad", p.counts[w], gy, 256, uint64(buf), uint64(buf)+uint64(off*8), pArg(x), pArg(dy), iArg(in), iArg(out))
	}
	d.put(buf)
}

// splitLaunch launches lora_shrink or lora_back_dz (kernel), whose inner dimension is k
// (in or out), over the plan's row tiles and rank tiles: in one pass where k ≤ loraSplit,
// else in ⌈k/loraSplit⌉ parts whose sums lora_split_sum adds in order into the runs'
// field (5: Z, 8: dZ).
func (d *Device) splitLaunch(kernel string, field int, p *loraPlan, buf uintptr, tiles, src uint64, k int) {
	rt, parts := ceilDiv(p.maxRank, loraTile), ceilDiv(k, loraSplit)
	if parts <= 1 {
		d.launch(kernel, p.tiles, rt, 256, uint64(buf), tiles, src, iArg(k), 0, iArg(1))
		return
	}
	part := d.get(uintptr(parts*p.tiles*rt*loraTile*loraTile*4), false)
	d.launch(kernel, p.tiles, rt*parts, 256, uint64(buf), tiles, src, iArg(k), uint64(part), iArg(parts))
	d.launch("lora_split_sum", p.tiles, rt, 256, uint64(buf), tiles, uint64(part), iArg(parts), iArg(field))
	d.put(part)
}
