package kern

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestGemmPanelsIsGemmMasked checks that products over packed panels (PackNT, GemmPanels)
// give GemmMasked's bits on the same operands: prefixes of the packed rows (ragged last
// panels), causal masks, accumulation, few and many rows; and that the panels are what
// is read (a value changed in them changes the product).
func TestGemmPanelsIsGemmMasked(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	fill := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(rng.NormFloat64())
		}
		return s
	}
	const nx, ldx = 203, 200 // X: 203 rows, k of them used, at row stride 200
	x := fill(nx * ldx)
	for _, k := range []int{64, 128} {
		buf := make([]float32, PanelsLen(nx, k))
		p := PackNT(buf, x, nx, k, ldx)
		if useAVX2 && !p.packed {
			t.Fatalf("k=%d: nothing packed", k)
		}
		for _, m := range []int{6, 17, 48, 96} {
			a := fill(m * 300)
			for _, n := range []int{16, 37, 150, nx} {
				for _, mk := range []Mask{{}, {Kind: MaskC, Off: n - m}, {Kind: MaskC, Off: 3}} {
					for _, acc := range []bool{false, true} {
						const ldc = 211
						c0 := fill(m * ldc)
						want, got := append([]float32(nil), c0...), append([]float32(nil), c0...)
						GemmMasked(want, a, x, m, n, k, ldc, 300, ldx, false, true, acc, mk)
						GemmPanels(got, a, &p, m, n, ldc, 300, acc, mk)
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("k=%d m=%d n=%d mask %+v acc=%v: element %d (row %d col %d) = %v, want %v",
									k, m, n, mk, acc, i, i/ldc, i%ldc, got[i], want[i])
							}
						}
					}
				}
			}
		}
		if p.packed {
			m, n := 48, 100
			a := fill(m * 300)
			before := make([]float32, m*n)
			GemmPanels(before, a, &p, m, n, n, 300, false, Mask{})
			buf[5*nr+3] += 1 // step 5 of column 3
			after := make([]float32, m*n)
			GemmPanels(after, a, &p, m, n, n, 300, false, Mask{})
			if after[3] == before[3] {
				t.Fatalf("k=%d: a changed panel left the product as it was: the panels are not read", k)
			}
		}
	}
}

// TestGemmPanelsUnpacked checks the fallback: without a buffer (or without the packed
// kernel) GemmPanels reads X itself.
func TestGemmPanelsUnpacked(t *testing.T) {
	x := make([]float32, 40*64)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	a := make([]float32, 12*64)
	for i := range a {
		a[i] = float32(i%5) - 2
	}
	p := PackNT[float32](nil, x, 40, 64, 64)
	want, got := make([]float32, 12*40), make([]float32, 12*40)
	GemmMasked(want, a, x, 12, 40, 64, 40, 64, 64, false, true, false, Mask{})
	GemmPanels(got, a, &p, 12, 40, 40, 64, false, Mask{})
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("element %d = %v, want %v", i, got[i], want[i])
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a product past the rows packed did not panic")
		}
	}()
	GemmPanels(got, a, &p, 12, 41, 41, 64, false, Mask{})
}
