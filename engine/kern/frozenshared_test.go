package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestFrozenSharedIsSeparate: products that share an activation, run as one
// (FrozenMatMulNTShared), give every output bit for bit what FrozenMatMulNT (or
// FrozenMatMulNTWide) gives alone, in every format, at one row (the shared split) and at
// several (one after the other), on one core and on several, whatever the outputs held.
func TestFrozenSharedIsSeparate(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	rng := rand.New(rand.NewPCG(7, 8))
	const k = 512
	for _, f := range append(allFormats, Q5_0) {
		// Q, K and V of a layer: 576-, 192- and 192-row shapes scaled down; odd counts too.
		ns := []int{96, 32, 32, 17}
		ws := make([]*Frozen, len(ns))
		for i, n := range ns {
			if f == Q5_0 {
				ws[i] = NewFrozen(randSlice(rng, n*k), n, k, Q5_0)
				continue
			}
			ws[i] = NewFrozen(randSlice(rng, n*k), n, k, f)
		}
		for _, m := range []int{1, 3} {
			for _, wide := range []bool{false, true} {
				for _, procs := range []int{1, 2, 3} {
					runtime.GOMAXPROCS(procs)
					name := fmt.Sprintf("%s m=%d wide=%v procs=%d", f, m, wide, procs)
					a := randSlice(rng, m*k)
					outs := make([]FrozenOut, len(ws))
					want := make([][]float32, len(ws))
					for i, w := range ws {
						want[i] = make([]float32, m*w.Rows)
						if wide {
							FrozenMatMulNTWide(want[i], a, w, m, false)
						} else {
							FrozenMatMulNT(want[i], a, w, m, false)
						}
						outs[i] = FrozenOut{C: randSlice(rng, m*w.Rows), W: w, Wide: wide}
					}
					FrozenMatMulNTShared(a, outs, m)
					for i := range outs {
						for j, v := range outs[i].C {
							if math.Float32bits(v) != math.Float32bits(want[i][j]) {
								t.Fatalf("%s: output %d element %d is %v alone, %v shared", name, i, j, want[i][j], v)
							}
						}
					}
				}
			}
		}
	}
}

// TestFrozenSharedRefusesMixedWidths: weights of different widths cannot share a row.
func TestFrozenSharedRefusesMixedWidths(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	a := randSlice(rng, 64)
	w1, w2 := NewFrozen(randSlice(rng, 4*64), 4, 64, BF16), NewFrozen(randSlice(rng, 4*32), 4, 32, BF16)
	defer func() {
		if recover() == nil {
			t.Fatal("weights of 64 and 32 columns shared one activation without a panic")
		}
	}()
	FrozenMatMulNTShared(a, []FrozenOut{{C: make([]float32, 4), W: w1}, {C: make([]float32, 4), W: w2}}, 1)
}
