package kern

import "math"

// Max returns the largest element of a non-empty x, as a fold of the builtin max gives
// it: NaN when any element is NaN, +0 rather than −0 when both are the largest. A softmax
// row's maximum (attention's scores, the loss head's logits over the vocabulary) took
// 7 % of a 512-token attention layer on one compare per element; the assembly compares
// 32 a step.
func Max[T Float](x []T) T {
	if x32, ok := any(x).([]float32); ok && useAVX2 && len(x) >= 32 {
		n := len(x) &^ 31
		m, nan := max32AVX(&x32[0], n)
		if nan {
			return T(math.NaN())
		}
		for _, v := range x32[n:] {
			m = max(m, v)
		}
		if m != m {
			return T(m) // NaN in the tail
		}
		if m != 0 {
			return T(m)
		}
		// A largest element of zero: the vector compare does not order −0 and +0.
	}
	return maxGo(x)
}

// maxGo is Max in four chains of the builtin max, so the compares overlap.
func maxGo[T Float](x []T) T {
	m0 := x[0]
	m1, m2, m3 := m0, m0, m0
	i := 0
	for ; i+4 <= len(x); i += 4 {
		m0 = max(m0, x[i])
		m1 = max(m1, x[i+1])
		m2 = max(m2, x[i+2])
		m3 = max(m3, x[i+3])
	}
	for ; i < len(x); i++ {
		m0 = max(m0, x[i])
	}
	return max(max(m0, m1), max(m2, m3))
}
