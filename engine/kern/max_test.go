package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMax checks Max against the builtin max folded left to right, bit for bit (a NaN
// only as a NaN), on the assembly and the portable path: lengths around the 32-float
// step, a NaN in the vector part and in the tail, −0 against +0, all negative.
func TestMax(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	fold := func(x []float32) float32 {
		m := x[0]
		for _, v := range x[1:] {
			m = max(m, v)
		}
		return m
	}
	negZero := float32(math.Copysign(0, -1))
	nan := float32(math.NaN())
	type tc struct {
		name string
		x    []float32
	}
	var cases []tc
	for _, n := range []int{1, 3, 31, 32, 33, 63, 64, 65, 100, 257, 49152} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		cases = append(cases, tc{fmt.Sprint("random ", n), x})
		neg := make([]float32, n)
		for i := range neg {
			neg[i] = -1 - float32(rng.Float64())
		}
		cases = append(cases, tc{fmt.Sprint("negative ", n), neg})
		for _, at := range []int{0, n / 2, n - 1} {
			y := append([]float32(nil), x...)
			y[at] = nan
			cases = append(cases, tc{fmt.Sprintf("NaN at %d of %d", at, n), y})
		}
		zs := make([]float32, n)
		for i := range zs {
			zs[i] = -float32(rng.Float64()) - 0.5
		}
		zs[n-1] = negZero
		zs[0] = 0
		cases = append(cases, tc{fmt.Sprint("±0 ", n), zs})
		nz := append([]float32(nil), zs...)
		nz[0] = negZero
		cases = append(cases, tc{fmt.Sprint("−0 ", n), nz})
	}
	inf := make([]float32, 64)
	for i := range inf {
		inf[i] = float32(math.Inf(-1))
	}
	cases = append(cases, tc{"all −Inf", inf})
	for _, path := range []string{"assembly", "portable"} {
		run := func(f func()) { f() }
		if path == "portable" {
			run = withGeneric
		}
		run(func() {
			for _, c := range cases {
				got, want := Max(c.x), fold(c.x)
				if want != want {
					if got == got {
						t.Errorf("%s %s: Max = %v, want NaN", path, c.name, got)
					}
					continue
				}
				if math.Float32bits(got) != math.Float32bits(want) {
					t.Errorf("%s %s: Max = %v (%#x), want %v (%#x)", path, c.name, got, math.Float32bits(got), want, math.Float32bits(want))
				}
			}
		})
	}
	if got := Max([]float64{1, math.NaN(), 3}); got == got {
		t.Errorf("float64 Max with a NaN = %v", got)
	}
}

func BenchmarkMax(b *testing.B) {
	x := make([]float32, 49152)
	for i := range x {
		x[i] = float32(i%977) * 0.5
	}
	for _, path := range []string{"assembly", "portable"} {
		b.Run(path, func(b *testing.B) {
			run := func(f func()) { f() }
			if path == "portable" {
				run = withGeneric
			}
			run(func() {
				for b.Loop() {
					Max(x)
				}
			})
			b.SetBytes(4 * int64(len(x)))
		})
	}
}

// TestSubMul checks SubMul against the Go expression it replaces, bit for bit, on the
// assembly and the portable path, over lengths with and without a tail.
func TestSubMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for _, n := range []int{1, 7, 8, 9, 33, 512} {
		p, x := make([]float32, n), make([]float32, n)
		for i := range p {
			p[i], x[i] = float32(rng.Float64()), float32(rng.NormFloat64())
		}
		d, s := float32(0.37), float32(0.125)
		want := make([]float32, n)
		for i := range want {
			want[i] = p[i] * (x[i] - d) * s
		}
		for _, path := range []string{"assembly", "portable"} {
			run := func(f func()) { f() }
			if path == "portable" {
				run = withGeneric
			}
			got := append([]float32(nil), x...)
			run(func() { SubMul(got, p, d, s) })
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s n=%d: element %d = %v, want %v", path, n, i, got[i], want[i])
				}
			}
		}
	}
}

// TestSwiGLU: SwiGLU and SwiGLUBack give the Go expressions' bits, each operation rounded
// on its own, on the assembly and the portable path, over lengths with and without a
// tail, and values whose exp overflows or underflows.
func TestSwiGLU(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	for _, n := range []int{1, 7, 8, 9, 33, 512} {
		g, u, da := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range g {
			g[i], u[i], da[i] = float32(rng.NormFloat64()*4), float32(rng.NormFloat64()), float32(rng.NormFloat64())
		}
		g[0] = 100 // exp(−g) underflows to 0
		if n > 1 {
			g[1] = -100 // exp(−g) overflows to +Inf
		}
		e := make([]float32, n)
		Exp(e, g, -1, 0)
		wa, wdg, wdu := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range g {
			den := float32(1 + e[i])
			wa[i] = float32(float32(g[i]/den) * u[i])
			sg := float32(1 / den)
			wdu[i] = float32(float32(da[i]*g[i]) * sg)
			one := float32(1 + float32(g[i]*float32(1-sg)))
			wdg[i] = float32(float32(float32(da[i]*u[i])*sg) * one)
		}
		for _, path := range []string{"assembly", "portable"} {
			run := func(f func()) { f() }
			if path == "portable" {
				run = withGeneric
			}
			a, dg, du := make([]float32, n), make([]float32, n), make([]float32, n)
			run(func() {
				SwiGLU(a, g, u, e)
				SwiGLUBack(dg, du, da, g, u, e)
			})
			for _, c := range []struct {
				name      string
				got, want []float32
			}{{"a", a, wa}, {"dg", dg, wdg}, {"du", du, wdu}} {
				if i := firstDiff(c.got, c.want); i >= 0 {
					t.Fatalf("%s n=%d: %s[%d] = %v, want %v", path, n, c.name, i, c.got[i], c.want[i])
				}
			}
		}
	}
}
