package kern

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// TestGemmLoRA: a product carrying a LoRA term gives bit for bit what the separate
// products give (base, down, scaling, accumulating up), in both orientations, with and
// without accumulation, for ranks of one panel, several and a ragged one, on 1–3
// goroutines; where those products would not all take the packed GEMM it declines and
// writes nothing.
func TestGemmLoRA(t *testing.T) {
	if !useAVX2 {
		t.Skip("the fused product runs on the assembly's packed GEMM only")
	}
	rng := rand.New(rand.NewPCG(21, 22))
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	type shape struct{ m, n, k, r int }
	shapes := []shape{{512, 576, 576, 16}, {300, 1536, 576, 16}, {264, 192, 576, 32}, {270, 40, 192, 20}, {512, 576, 1536, 8}, {192, 192, 576, 16}}
	for _, procs := range []int{1, 2, 3} {
		old := runtime.GOMAXPROCS(procs)
		for _, s := range shapes {
			for _, nt := range []bool{true, false} {
				for _, acc := range []bool{false, true} {
					if nt && acc {
						continue // the forward product writes C
					}
					name := fmt.Sprintf("procs %d %dx%dx%d r%d nt=%v acc=%v", procs, s.m, s.n, s.k, s.r, nt, acc)
					m, n, k, r := s.m, s.n, s.k, s.r
					a, c0 := rnd(m*k), rnd(m*n)
					var w *Frozen
					var bz, bt []float32
					if nt {
						w, bz, bt = NewFrozen(rnd(n*k), n, k, F32), rnd(r*k), rnd(n*r)
					} else {
						w, bz, bt = NewFrozen(rnd(k*n), k, n, F32), rnd(k*r), rnd(r*n)
					}
					const scale = 0.37
					want, wz := slices.Clone(c0), make([]float32, m*r)
					if nt {
						FrozenMatMulNT(want, a, w, m, false)
						MatMulNT(wz, a, bz, m, r, k, false)
					} else {
						FrozenMatMulNN(want, a, w, m, acc)
						MatMulNN(wz, a, bz, m, r, k, false)
					}
					for i := range wz {
						wz[i] *= scale
					}
					if nt {
						MatMulNT(want, wz, bt, m, n, r, true)
					} else {
						MatMulNN(want, wz, bt, m, n, r, true)
					}
					got, z := slices.Clone(c0), rnd(m*r) // Z is overwritten
					l := LoRA{Z: z, Bz: bz, Bt: bt, R: r, Scale: scale}
					var fused bool
					if nt {
						fused = FrozenMatMulNTLoRA(got, a, w, m, l)
					} else {
						fused = FrozenMatMulNNLoRA(got, a, w, m, acc, l)
					}
					if want := m >= rowSplitRows() && (!nt || w.f32Packed(m)); fused != want {
						t.Fatalf("%s: fused %v, want %v (rows split from %d)", name, fused, want, rowSplitRows())
					}
					if !fused {
						if !slices.Equal(got, c0) {
							t.Fatalf("%s: declined, yet C changed", name)
						}
						continue
					}
					if i := firstDiff(z, wz); i >= 0 {
						t.Fatalf("%s: Z[%d] = %v, separately %v", name, i, z[i], wz[i])
					}
					if i := firstDiff(got, want); i >= 0 {
						t.Fatalf("%s: C[%d] = %v, separately %v", name, i, got[i], want[i])
					}
				}
			}
		}
		runtime.GOMAXPROCS(old)
	}
	// Declined: a rank whose own products take another path, weights not float32.
	m, n, k := 512, 64, 64
	a, c := rnd(m*k), make([]float32, m*n)
	if FrozenMatMulNTLoRA(c, a, NewFrozen(rnd(n*k), n, k, F32), m, LoRA{Z: make([]float32, m*4), Bz: rnd(4 * k), Bt: rnd(n * 4), R: 4, Scale: 1}) {
		t.Fatal("rank 4 (its products take the unpacked paths) was fused")
	}
	if FrozenMatMulNTLoRA(c, a, NewFrozen(rnd(n*k), n, k, BF16), m, LoRA{Z: make([]float32, m*16), Bz: rnd(16 * k), Bt: rnd(n * 16), R: 16, Scale: 1}) {
		t.Fatal("bfloat16 weights were fused")
	}
}

// TestGemmDoesNotAllocatePerPanel: a packed product on one goroutine, with or without a
// LoRA term, allocates a few objects a call (closures), not a panel (a ragged tile's scratch escaping per panel once cost an allocation per panel and
// 5 % of a training step).
func TestGemmDoesNotAllocatePerPanel(t *testing.T) {
	if !useAVX2 {
		t.Skip("the packed GEMM runs on the assembly")
	}
	if raceOn {
		t.Skip("the race detector drops sync.Pool's items at random: the scratch buffers are allocated again")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	allocs := func(n int) (plain, lora float64) {
		m, k, r := 300, 96, 16 // ragged rows
		a, c, z := make([]float32, m*k), make([]float32, m*n), make([]float32, m*r)
		w := NewFrozen(make([]float32, n*k), n, k, F32)
		l := LoRA{Z: z, Bz: make([]float32, r*k), Bt: make([]float32, n*r), R: r, Scale: 1}
		plain = testing.AllocsPerRun(20, func() { MatMulNT(c, a, w.f32, m, n, k, false) })
		lora = testing.AllocsPerRun(20, func() {
			if !FrozenMatMulNTLoRA(c, a, w, m, l) {
				t.Fatal("not fused")
			}
		})
		return plain, lora
	}
	p1, l1 := allocs(200)
	p2, l2 := allocs(808) // four times the panels, a ragged last one
	if p1 != p2 || l1 != l2 {
		t.Fatalf("allocations a call: MatMulNT %v and %v, FrozenMatMulNTLoRA %v and %v (13 and 51 panels)", p1, p2, l1, l2)
	}
}
