package device

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAdamWIfFinite: the checked update over many tensors gives AdamW's bits tensor by
// tensor (gradients zeroed), and where one result would overflow it changes nothing and
// says so.
func TestAdamWIfFinite(t *testing.T) {
	lens := []int{1, 7, elemGrain - 1, elemGrain, 3*elemGrain + 5, 40}
	s := &AdamStep{Clip: 0.7, Decay: 0.999, B1: 0.9, B2: 0.95, StepSize: 1e-3, BC2Sqrt: 0.3, Eps: 1e-8}
	mk := func() (w, g, m, v [][]float32) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, n := range lens {
			f := func(sc float64, pos bool) []float32 {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(r.NormFloat64() * sc)
					if pos {
						x[i] = float32(math.Abs(float64(x[i])))
					}
				}
				return x
			}
			w, g, m, v = append(w, f(0.1, false)), append(g, f(0.01, false)), append(m, f(0.001, false)), append(v, f(1e-5, true))
		}
		return
	}
	host := func(xs [][]float32) []Tensor[float32] {
		var ts []Tensor[float32]
		for _, x := range xs {
			ts = append(ts, Host(x))
		}
		return ts
	}
	cpu := NewCPU[float32]()
	w1, g1, m1, v1 := mk()
	for i := range w1 {
		cpu.AdamW(Host(w1[i]), Host(g1[i]), Host(m1[i]), Host(v1[i]), s)
	}
	w2, g2, m2, v2 := mk()
	if !cpu.AdamWIfFinite(host(w2), host(g2), host(m2), host(v2), s) {
		t.Fatal("a finite update was refused")
	}
	for i := range w1 {
		for _, p := range [][2][]float32{{w1[i], w2[i]}, {g1[i], g2[i]}, {m1[i], m2[i]}, {v1[i], v2[i]}} {
			for j := range p[0] {
				if math.Float32bits(p[0][j]) != math.Float32bits(p[1][j]) {
					t.Fatalf("tensor %d element %d: %v in one call, %v tensor by tensor", i, j, p[1][j], p[0][j])
				}
			}
		}
	}
	w3, g3, m3, v3 := mk()
	g3[4][2*elemGrain+1] = 1e25 // its square overflows the second moment
	w4, g4, m4, v4 := mk()
	g4[4][2*elemGrain+1] = 1e25
	if cpu.AdamWIfFinite(host(w3), host(g3), host(m3), host(v3), s) {
		t.Fatal("an update that overflows a moment was applied")
	}
	for i := range w3 {
		for _, p := range [][2][]float32{{w3[i], w4[i]}, {g3[i], g4[i]}, {m3[i], m4[i]}, {v3[i], v4[i]}} {
			for j := range p[0] {
				if math.Float32bits(p[0][j]) != math.Float32bits(p[1][j]) {
					t.Fatalf("refused update changed tensor %d element %d: %v → %v", i, j, p[1][j], p[0][j])
				}
			}
		}
	}
}
