package kern

// SubMul sets x[i] = p[i]·(x[i] − d)·s over len(p) (x at least as long), each operation
// rounded on its own, left to right: softmax's backward, dS = P∘(dP − rowsum(P∘dP))·scale
// over a row of attention scores (a Go loop of one element at a time was a tenth of a
// 512-token attention layer's backward outside its products).
func SubMul[T Float](x, p []T, d, s T) {
	x = x[:len(p)]
	if x32, ok := any(x).([]float32); ok && useAVX2 {
		p32 := any(p).([]float32)
		n8 := len(p32) &^ 7
		if n8 > 0 {
			subMul32AVX(&x32[0], &p32[0], n8, float32(d), float32(s))
		}
		subMulGo(x32[n8:], p32[n8:], float32(d), float32(s))
		return
	}
	subMulGo(x, p, d, s)
}

// subMulGo is SubMul's portable loop.
func subMulGo[T Float](x, p []T, d, s T) {
	x = x[:len(p)]
	for i, v := range p {
		x[i] = v * (x[i] - d) * s
	}
}
