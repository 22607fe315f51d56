package kern

import "sync"

// Products of a few to a few hundred rows with bfloat16 weights have two AVX-512 paths:
// tileDPBF16's VDPBF16PS, which multiplies pairs of bfloat16 (twice an FMA's rate where
// the core runs it at one a cycle), and the float32 16-wide tiles (tileF32x512) over W's
// rows widened exactly into L1 scratch, A rounded to bfloat16 as on the other path. On the
// Xeon of docs/performance.md VDPBF16PS runs at half that rate: 128-row prompts of
// SmolLM2's MLP at 60 GFLOP per CPU second against 76–90 for the widened tiles (and a
// 128-token prefill 438 → 481 tokens/s). The choice is measured once, on the first such
// product, and keeps VDPBF16PS only where it is at least 10 % faster; the widened tiles
// also give a decode row bit for bit what the same row gives in a prompt (dotsBF16z sums
// as tile1F32x512), which VDPBF16PS's pairwise sums do not.

// bf16ZForce overrides the measurement (tests): 1 takes the widened tiles wherever
// AVX-512 allows, -1 never, 0 measures.
var bf16ZForce = 0

var bf16ZMeasure struct {
	once sync.Once
	z    bool
}

// bf16ZTiles reports whether bfloat16 products take the widened float32 tiles.
func bf16ZTiles() bool {
	switch {
	case !useAVX512:
		return false
	case bf16ZForce != 0:
		return bf16ZForce > 0
	case !useDPBF16:
		return true
	}
	bf16ZMeasure.once.Do(func() { bf16ZMeasure.z = !dpTileFaster() })
	return bf16ZMeasure.z
}

// dpTileFaster times both paths on 64 rows of A against 16 rows of W at k = 576 (all in
// L2; the widened path widens W's four rows once per tile column as zProduct does),
// alternately, best of 5 each, and says whether VDPBF16PS is at least 10 % faster.
func dpTileFaster() bool {
	const k, m, n, passes = 576, 64, 16, 4
	ab, wb := make([]uint16, m*k), make([]uint16, n*k)
	af, wide := make([]float32, m*k), make([]float32, 4*k)
	for i := range ab {
		ab[i] = ToBF16(float32(i%7) * 0.25)
		af[i] = FromBF16(ab[i])
	}
	for i := range wb {
		wb[i] = ToBF16(float32(i%5) * 0.5)
	}
	var out [16]float32
	dp := func() {
		for j := 0; j < n; j += 4 {
			for i := 0; i < m; i += 4 {
				tileDPBF16(&ab[i*k], 2*k, &wb[j*k], 2*k, k/32, &out[0])
			}
		}
	}
	z := func() {
		for j := 0; j < n; j += 4 {
			widenBF16AVX(&wide[0], &wb[j*k], 4*k)
			for i := 0; i < m; i += 4 {
				tileF32x512(&af[i*k], 4*k, &wide[0], 4*k, k/16, &out[0])
			}
		}
	}
	return tenPercentFaster(passes, dp, z)
}
