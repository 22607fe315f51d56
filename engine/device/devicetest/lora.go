package devicetest

import (
	"fmt"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
)

// loraAdapter is one adapter of the grouped LoRA check: its pair and gradients, in
// float64 (rounded to float32) and on the device under test.
type loraAdapter struct {
	rank         int
	scale        float64
	grad         bool
	a, b, ga, gb []float64
	da, db       device.Tensor[float32]
	dga, dgb     device.Tensor[float32]
	pga, pgb     device.Tensor[float32] // gradients of the per-run path on the device
	ga0, gb0     []float64              // the gradients' initial values
}

// loraSpan is one run of rows of the check: rows [row, row+n) with adapter ad.
type loraSpan struct{ row, n, ad int }

// lora checks LoraForward and LoraBackward against a float64 per-run reference and the
// device's own per-run products: ragged runs (1 to 21 rows), rows that no run covers,
// ranks 1 to 64, runs of one adapter that share its gradients (not adjacent), and a run
// that takes no gradients; the backward pass with and without dx. A single run is
// checked too (a device may take another path for it).
func (c *checker) lora(t *testing.T) {
	mixed := []loraSpan{{0, 7, 0}, {10, 21, 1}, {31, 1, 2}, {32, 3, 3}, {35, 20, 1}, {55, 5, 2}} // rows 7–9, 60–63: no adapter
	c.loraCase(t, mixed, 48, 40)
	c.loraCase(t, []loraSpan{{12, 40, 1}}, 48, 40)
	// Inner dimensions long enough that a device may split their sums (the CUDA device:
	// over 256, a ragged last part).
	c.loraCase(t, mixed, 600, 300)
}

func (c *checker) loraCase(t *testing.T, spans []loraSpan, in, out int) {
	rows := 64
	ads := []*loraAdapter{{rank: 1, scale: 2, grad: true}, {rank: 16, scale: 0.5, grad: true},
		{rank: 64, scale: 0.25, grad: true}, {rank: 8, scale: 1.5}}
	for _, a := range ads {
		a.scale = float64(float32(a.scale))
		a.a, a.b = f32(c.rand(a.rank*in, 0.3)), f32(c.rand(out*a.rank, 0.3))
		a.da, a.db = c.up(a.a), c.up(a.b)
		if a.grad {
			a.ga, a.gb = f32(c.rand(a.rank*in, 1)), f32(c.rand(out*a.rank, 1))
			a.ga0, a.gb0 = append([]float64(nil), a.ga...), append([]float64(nil), a.gb...)
			a.dga, a.dgb = c.up(a.ga), c.up(a.gb)
			a.pga, a.pgb = c.up(a.ga), c.up(a.gb)
		}
	}
	x, y0, dy, dx0 := f32(c.rand(rows*in, 1)), f32(c.rand(rows*out, 1)), f32(c.rand(rows*out, 1)), f32(c.rand(rows*in, 1))

	// The float64 reference, run by run.
	wy, wdx := append([]float64(nil), y0...), append([]float64(nil), dx0...)
	var wz []float64
	for _, s := range spans {
		a := ads[s.ad]
		z := make([]float64, s.n*a.rank)
		c.ref.MatMulNT(h64(z), h64(x[s.row*in:(s.row+s.n)*in]), h64(a.a), s.n, a.rank, in, false)
		c.ref.Scale(h64(z), a.scale)
		c.ref.MatMulNT(h64(wy[s.row*out:(s.row+s.n)*out]), h64(z), h64(a.b), s.n, out, a.rank, true)
		dz := make([]float64, s.n*a.rank)
		c.ref.MatMulNN(h64(dz), h64(dy[s.row*out:(s.row+s.n)*out]), h64(a.b), s.n, a.rank, out, false)
		c.ref.Scale(h64(dz), a.scale)
		if a.grad {
			c.ref.MatMulTN(h64(a.gb), h64(dy[s.row*out:(s.row+s.n)*out]), h64(z), out, a.rank, s.n, true)
			c.ref.MatMulTN(h64(a.ga), h64(dz), h64(x[s.row*in:(s.row+s.n)*in]), a.rank, in, s.n, true)
		}
		c.ref.MatMulNN(h64(wdx[s.row*in:(s.row+s.n)*in]), h64(dz), h64(a.a), s.n, in, a.rank, true)
		wz = append(wz, z...)
	}

	// The device's per-run path (what the engine ran before the grouped product).
	d := c.d
	dX, dY, dDY := c.up(x), c.up(y0), c.up(dy)
	pdx := c.up(dx0)
	for _, s := range spans {
		a := ads[s.ad]
		z, dz := d.Alloc(s.n*a.rank), d.Alloc(s.n*a.rank)
		xs, ys, dys := dX.Slice(s.row*in, (s.row+s.n)*in), dY.Slice(s.row*out, (s.row+s.n)*out), dDY.Slice(s.row*out, (s.row+s.n)*out)
		d.MatMulNT(z, xs, a.da, s.n, a.rank, in, false)
		d.Scale(z, float32(a.scale))
		d.MatMulNT(ys, z, a.db, s.n, out, a.rank, true)
		d.MatMulNN(dz, dys, a.db, s.n, a.rank, out, false)
		d.Scale(dz, float32(a.scale))
		if a.grad {
			d.MatMulTN(a.pgb, dys, z, out, a.rank, s.n, true)
			d.MatMulTN(a.pga, dz, xs, a.rank, in, s.n, true)
		}
		d.MatMulNN(pdx.Slice(s.row*in, (s.row+s.n)*in), dz, a.da, s.n, in, a.rank, true)
		d.Free(z)
		d.Free(dz)
	}
	perRunY, perRunDX := c.down(dY), c.down(pdx)

	// The grouped product.
	runs := make([]device.LoraRun[float32], len(spans))
	for i, s := range spans {
		a := ads[s.ad]
		runs[i] = device.LoraRun[float32]{Row: s.row, N: s.n, Rank: a.rank, A: a.da, B: a.db, Scale: float32(a.scale)}
		if a.grad {
			runs[i].GA, runs[i].GB = a.dga, a.dgb
		}
	}
	zall := d.Alloc(device.LoraScratch(runs))
	for i, off := 0, 0; i < len(runs); i++ {
		n := runs[i].N * runs[i].Rank
		runs[i].Z = zall.Slice(off, off+n)
		off += n
	}
	gy := c.up(y0)
	d.LoraForward(gy, dX, runs, in, out)
	c.err("LoraForward")
	got := c.down(gy)
	c.near("LoraForward y", got, wy, c.tol.Product)
	c.near("LoraForward y against the per-run path", got, perRunY, c.tol.Product)
	c.near("LoraForward z", c.down(zall), wz, c.tol.Product)
	for i, v := range got[60*out:] {
		if v != y0[60*out+i] {
			t.Fatalf("LoraForward changed row %d, which no run covers", 60+i/out)
		}
	}

	gdx, dz := c.up(dx0), d.Alloc(device.LoraScratch(runs))
	d.LoraBackward(gdx, dDY, dX, dz, runs, in, out)
	c.err("LoraBackward")
	gotDX := c.down(gdx)
	c.near("LoraBackward dx", gotDX, wdx, c.tol.Product)
	c.near("LoraBackward dx against the per-run path", gotDX, perRunDX, c.tol.Product)
	for i, v := range gotDX[60*in:] {
		if v != dx0[60*in+i] {
			t.Fatalf("LoraBackward changed dx row %d, which no run covers", 60+i/in)
		}
	}
	for k, a := range ads {
		if !a.grad {
			continue
		}
		name := fmt.Sprintf("adapter %d (rank %d)", k, a.rank)
		c.near("LoraBackward GA "+name, c.down(a.dga), a.ga, c.tol.Product)
		c.near("LoraBackward GB "+name, c.down(a.dgb), a.gb, c.tol.Product)
		c.near("LoraBackward GA against the per-run path "+name, c.down(a.dga), c.down(a.pga), c.tol.Product)
		c.near("LoraBackward GB against the per-run path "+name, c.down(a.dgb), c.down(a.pgb), c.tol.Product)
	}

	// Without dx (the layer below needs none), the gradients grow by the same amount
	// again and nothing else is written.
	d.LoraBackward(device.Tensor[float32]{}, dDY, dX, dz, runs, in, out)
	c.err("LoraBackward without dx")
	for k, a := range ads {
		if !a.grad {
			continue
		}
		twice := func(ref, init []float64) []float64 {
			w := make([]float64, len(ref))
			for j := range w {
				w[j] = 2*ref[j] - init[j]
			}
			return w
		}
		name := fmt.Sprintf("adapter %d (rank %d)", k, a.rank)
		c.near("LoraBackward without dx, GA "+name, c.down(a.dga), twice(a.ga, a.ga0), c.tol.Product)
		c.near("LoraBackward without dx, GB "+name, c.down(a.dgb), twice(a.gb, a.gb0), c.tol.Product)
	}
	for _, a := range ads {
		d.Free(a.da)
		d.Free(a.db)
		if a.grad {
			d.Free(a.dga)
			d.Free(a.dgb)
			d.Free(a.pga)
			d.Free(a.pgb)
		}
	}
	for _, tt := range []device.Tensor[float32]{dX, dY, dDY, pdx, zall, gy, gdx, dz} {
		d.Free(tt)
	}
	c.err("lora")
}
