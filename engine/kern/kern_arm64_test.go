//go:build arm64 && !purego

package kern

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestNEONKernels checks each NEON kernel directly against a float64 reference, at the
// lengths that take every loop of the assembly (16-wide, 4- or 8-wide, scalar tail) and
// at edge cases (k = 0, accumulate into C, a row stride wider than the tile). The whole
// suite also runs the dispatch with NEON on and, through withGeneric/atLevel, off.
func TestNEONKernels(t *testing.T) {
	if !useAVX2 {
		t.Fatal("useAVX2 (the NEON switch) is off on arm64")
	}
	t.Logf("kernel path: %s", Path())
	rng := rand.New(rand.NewPCG(7, 8))
	t.Run("sgemm6x16", func(t *testing.T) {
		for _, k := range []int{0, 1, 2, 7, 33, 256} {
			for _, ldc := range []int{nr, 19} {
				for _, load := range []bool{false, true} {
					a, b := randSlice(rng, k*mr), randSlice(rng, k*nr)
					c := randSlice(rng, (mr-1)*ldc+nr)
					want := append([]float32(nil), c...)
					for r := 0; r < mr; r++ {
						for j := 0; j < nr; j++ {
							var s float64
							for p := 0; p < k; p++ {
								s += float64(a[p*mr+r]) * float64(b[p*nr+j])
							}
							if load {
								s += float64(want[r*ldc+j])
							}
							want[r*ldc+j] = float32(s)
						}
					}
					var ap, bp *float32
					if k > 0 {
						ap, bp = &a[0], &b[0]
					} else {
						ap, bp = new(float32), new(float32)
					}
					sgemm6x16(k, ap, bp, &c[0], ldc, load)
					close32(t, fmt.Sprintf("k=%d ldc=%d load=%v", k, ldc, load), c, want, k)
				}
			}
		}
	})
	t.Run("dot32 axpy32", func(t *testing.T) {
		for n := 8; n <= 70; n++ {
			x, y := randSlice(rng, n), randSlice(rng, n+3)
			var want float64
			for i := range x {
				want += float64(x[i]) * float64(y[i])
			}
			if got := dot32AVX(x, y); math.Abs(float64(got)-want) > 1e-5*math.Sqrt(float64(n))*4*math.Max(1, math.Abs(want)) {
				t.Fatalf("dot32 n=%d: %v, want %v", n, got, want)
			}
			got := append([]float32(nil), y...)
			wantY := append([]float32(nil), y...)
			for i := range x {
				wantY[i] = float32(float64(wantY[i]) + 0.75*float64(x[i]))
			}
			axpy32AVX(0.75, x, got)
			close32(t, fmt.Sprintf("axpy32 n=%d", n), got, wantY, 1)
		}
	})
	t.Run("bf16", func(t *testing.T) {
		for _, n := range []int{8, 16, 24, 64, 72, 584} {
			x := randSlice(rng, n)
			w := make([]uint16, n)
			var want float64
			wide := make([]float32, n)
			for i := range w {
				w[i] = ToBF16(float32(rng.NormFloat64()))
				want += float64(x[i]) * float64(FromBF16(w[i]))
			}
			if got := dotBF16AVX(&x[0], &w[0], n); math.Abs(float64(got)-want) > 1e-5*math.Sqrt(float64(n))*4*math.Max(1, math.Abs(want)) {
				t.Fatalf("dotBF16 n=%d: %v, want %v", n, got, want)
			}
			widenBF16AVX(&wide[0], &w[0], n)
			for i, v := range w {
				if math.Float32bits(wide[i]) != uint32(v)<<16 {
					t.Fatalf("widenBF16 n=%d: element %d = %v, want bits %#x", n, i, wide[i], uint32(v)<<16)
				}
			}
		}
	})
	t.Run("q8_0 q4_1", func(t *testing.T) {
		for _, nb := range []int{1, 2, 7} {
			x := randSlice(rng, nb*QBlock)
			q8 := make([]byte, nb*(2+QBlock))
			q4 := make([]byte, nb*(4+QBlock/2))
			for i := range q8 {
				q8[i] = byte(rng.Uint32())
			}
			for i := range q4 {
				q4[i] = byte(rng.Uint32())
			}
			// Scales: half-precision values of either sign between about 2^-8 and 1.
			scale := func() (uint16, float64) {
				h := uint16(0x1C00+rng.IntN(0x3C00-0x1C00)) | uint16(rng.IntN(2))<<15
				return h, float64(FromF16(h))
			}
			var want8, want4, mag8, mag4 float64
			for b := 0; b < nb; b++ {
				h, d := scale()
				binary.LittleEndian.PutUint16(q8[b*(2+QBlock):], h)
				hd, d4 := scale()
				hm, m4 := scale()
				blk4 := q4[b*(4+QBlock/2):]
				binary.LittleEndian.PutUint16(blk4, hd)
				binary.LittleEndian.PutUint16(blk4[2:], hm)
				for j := 0; j < QBlock; j++ {
					xv := float64(x[b*QBlock+j])
					w8 := d * float64(int8(q8[b*(2+QBlock)+2+j]))
					nib := blk4[4+j%(QBlock/2)] & 0xF
					if j >= QBlock/2 {
						nib = blk4[4+j-QBlock/2] >> 4
					}
					w4 := d4*float64(nib) + m4
					want8 += xv * w8
					want4 += xv * w4
					mag8 += math.Abs(xv * w8)
					mag4 += math.Abs(xv * w4)
				}
			}
			if got := dotQ8AVX(&x[0], &q8[0], nb); math.Abs(float64(got)-want8) > 1e-5*mag8 {
				t.Fatalf("dotQ8 nb=%d: %v, want %v", nb, got, want8)
			}
			if got := dotQ4AVX(&x[0], &q4[0], nb); math.Abs(float64(got)-want4) > 1e-5*mag4 {
				t.Fatalf("dotQ4 nb=%d: %v, want %v", nb, got, want4)
			}
		}
	})
}

// TestNEONKQuants checks the K-quant NEON kernels directly: the Q4_K, Q6_K and Q5_0 dots
// against a float64 dot with the portable dequantisers' weights (random blocks of every
// bit pattern, scales of either sign), and the Q4_K, Q6_K and Q5_0 widening bit for bit
// against those dequantisers, over one to five super-blocks (and the q4kChunk boundary).
func TestNEONKQuants(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 64))
	half := func() uint16 { // a half between about 2^-8 and 1, either sign
		return uint16(0x1C00+rng.IntN(0x3C00-0x1C00)) | uint16(rng.IntN(2))<<15
	}
	for _, c := range []struct {
		f      WeightFormat
		bl, bb int
		halves []int // byte offsets of the block's half-precision scales
	}{{Q4_K, QKBlock, 144, []int{0, 2}}, {Q6_K, QKBlock, 210, []int{208}}, {Q5_0, QBlock, 22, []int{0}}} {
		for _, nb := range []int{1, 2, 5, q4kChunk + 3} {
			if c.f == Q5_0 {
				nb *= 8
			}
			blk := make([]byte, nb*c.bb)
			for i := range blk {
				blk[i] = byte(rng.Uint32())
			}
			for b := 0; b < nb; b++ {
				for _, o := range c.halves {
					binary.LittleEndian.PutUint16(blk[b*c.bb+o:], half())
				}
			}
			x := randSlice(rng, nb*c.bl)
			deq := make([]float32, nb*c.bl)
			for b := 0; b < nb; b++ {
				c.f.deqBlock(deq[b*c.bl:(b+1)*c.bl], blk[b*c.bb:(b+1)*c.bb])
			}
			var want, mag float64
			for i := range x {
				p := float64(x[i]) * float64(deq[i])
				want += p
				mag += math.Abs(p)
			}
			var got float32
			switch c.f {
			case Q4_K:
				got = dotQ4KFast(x, blk)
			case Q6_K:
				got = dotQ6KFast(x, blk)
			default:
				got = dotQ5AVX(&x[0], &blk[0], nb)
			}
			if math.Abs(float64(got)-want) > 2e-6*mag {
				t.Errorf("%s dot nb=%d: %v, want %v (Σ|x·w| %g)", c.f, nb, got, want, mag)
			}
			wide := make([]float32, nb*c.bl)
			if c.f == Q5_0 {
				widenQ5AVX(&wide[0], &blk[0], nb)
			} else {
				var sc [q4kChunk * 16]float32
				for b0 := 0; b0 < nb; b0 += q4kChunk {
					k := min(q4kChunk, nb-b0)
					if c.f == Q6_K {
						unpackQ6KScales(sc[:], blk[b0*c.bb:], k)
						widenQ6KAVX(&wide[b0*c.bl], &blk[b0*c.bb], &sc[0], k)
						continue
					}
					unpackQ4KScales(sc[:], blk[b0*c.bb:], k)
					widenQ4KAVX(&wide[b0*c.bl], &blk[b0*c.bb], &sc[0], k)
				}
			}
			for i := range wide {
				if math.Float32bits(wide[i]) != math.Float32bits(deq[i]) {
					t.Fatalf("%s widen nb=%d: element %d = %v, want %v", c.f, nb, i, wide[i], deq[i])
				}
			}
		}
	}
}
