package kern

// SwiGLU sets a[i] = g[i]/(1 + e[i])·u[i] over len(g), where e[i] = exp(−g[i]) (Exp):
// the MLP's gate, silu(g)·u, each operation rounded on its own, left to right, 8 lanes
// a step in AVX2 (a Go loop of one element at a time, a division each, was a fifth of
// the elementwise work of a training step).
func SwiGLU[T Float](a, g, u, e []T) {
	n := len(g)
	a, u, e = a[:n], u[:n], e[:n]
	if a32, ok := any(a).([]float32); ok && useAVX2 {
		g32, u32, e32 := any(g).([]float32), any(u).([]float32), any(e).([]float32)
		n8 := n &^ 7
		if n8 > 0 {
			swiglu32AVX(&a32[0], &g32[0], &u32[0], &e32[0], n8)
		}
		swigluGo(a32[n8:], g32[n8:], u32[n8:], e32[n8:])
		return
	}
	swigluGo(a, g, u, e)
}

// swigluGo is SwiGLU's portable loop.
func swigluGo[T Float](a, g, u, e []T) {
	a, u, e = a[:len(g)], u[:len(g)], e[:len(g)]
	for i, gv := range g {
		a[i] = gv / (1 + e[i]) * u[i]
	}
}

// SwiGLUBack is SwiGLU's backward given da and e = exp(−g): with σ = 1/(1 + e[i]),
// du[i] = da[i]·g[i]·σ and dg[i] = da[i]·u[i]·σ·(1 + g[i]·(1 − σ)), each operation rounded
// on its own, left to right.
func SwiGLUBack[T Float](dg, du, da, g, u, e []T) {
	n := len(g)
	dg, du, da, u, e = dg[:n], du[:n], da[:n], u[:n], e[:n]
	if dg32, ok := any(dg).([]float32); ok && useAVX2 {
		du32, da32, g32, u32, e32 := any(du).([]float32), any(da).([]float32), any(g).([]float32), any(u).([]float32), any(e).([]float32)
		n8 := n &^ 7
		if n8 > 0 {
			swigluBack32AVX(&dg32[0], &du32[0], &da32[0], &g32[0], &u32[0], &e32[0], n8)
		}
		swigluBackGo(dg32[n8:], du32[n8:], da32[n8:], g32[n8:], u32[n8:], e32[n8:])
		return
	}
	swigluBackGo(dg, du, da, g, u, e)
}

// swigluBackGo is SwiGLUBack's portable loop. The conversions round each product, so no
// compiler fuses a multiply and an add the assembly keeps apart.
func swigluBackGo[T Float](dg, du, da, g, u, e []T) {
	n := len(g)
	dg, du, da, u, e = dg[:n], du[:n], da[:n], u[:n], e[:n]
	for i, gv := range g {
		sg := 1 / (1 + e[i])
		d := da[i]
		du[i] = d * gv * sg
		dg[i] = d * u[i] * sg * (1 + T(gv*(1-sg)))
	}
}
