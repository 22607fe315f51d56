package engine

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tuft-go/tuft/engine/kern"
)

// TestF32DecodeRowAlone: with f32 weights on the CPU (the Frozen F32 kernels, whose rows
// do not depend on the other rows: kern's TestFrozenF32RowAlone, and GemmRowwise
// attention), a position's log-probabilities are the same bit for bit decoded one token
// at a time as computed inside a prefill chunk: a prompt served after a cached prefix
// gives what the whole prompt gives. Without the assembly the products promise nothing
// (the test is skipped there).
func TestF32DecodeRowAlone(t *testing.T) {
	if p := kern.Path(); p != "avx2" && p != "avx512" {
		t.Skipf("kernel path %s: f32 products are row-independent on amd64's assembly only", kern.Path())
	}
	rng := rand.New(rand.NewPCG(11, 12))
	c := Config{Arch: "llama", VocabSize: 64, Hidden: 32, Intermediate: 48, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8,
		RopeTheta: 10000, RMSNormEps: 1e-5, MaxPositions: 64, BOSTokenID: -1, EOSTokenIDs: []int32{63}}
	m, err := NewModel("t", c, randWeights[float32](c, rng, true), nil)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := m.NewKVPool(16)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	toks := []int32{1, 5, 9, 3, 30, 12, 7, 44, 2, 17, 60, 33, 8, 21, 40, 11, 6, 50, 29, 3}
	V := c.VocabSize
	one, chunked := pool.NewCache(), pool.NewCache()
	defer one.Release()
	defer chunked.Release()
	var alone []float32
	for _, tok := range toks {
		alone = append(alone, stepLogp(t, m, nil, one, []int32{tok})...)
	}
	for _, r := range [][2]int{{0, 7}, {7, 20}} {
		got := stepLogp(t, m, nil, chunked, toks[r[0]:r[1]])
		for i := range got {
			if want := alone[r[0]*V+i]; math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("position %d token %d: %v in a chunk of %d, %v alone", r[0]+i/V, i%V, got[i], r[1]-r[0], want)
			}
		}
	}
}
