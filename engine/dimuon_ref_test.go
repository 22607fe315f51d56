package engine

import (
	"math"
	"math/rand/v2"
)

// Independent float64 references for the Dimuon tests (dimuon_test.go): the polar factor
// by Jacobi eigendecomposition, matrices of a chosen spectrum, and one Dimuon step written
// from its definition. They share nothing with the code under test.

// symEig returns the eigenvalues and eigenvectors (columns of v, row-major k×k) of the
// symmetric matrix s by cyclic Jacobi rotations: an independent route to the matrix sign,
// sharing nothing with the Newton–Schulz iteration under test.
func symEig(s []float64, k int) (vals, v []float64) {
	a := append([]float64(nil), s...)
	v = make([]float64, k*k)
	for i := range k {
		v[i*k+i] = 1
	}
	for sweep := 0; sweep < 100; sweep++ {
		var off float64
		for i := range k {
			for j := range k {
				if i != j {
					off += a[i*k+j] * a[i*k+j]
				}
			}
		}
		if off < 1e-30 {
			break
		}
		for p := 0; p < k; p++ {
			for q := p + 1; q < k; q++ {
				if a[p*k+q] == 0 {
					continue
				}
				theta := (a[q*k+q] - a[p*k+p]) / (2 * a[p*k+q])
				t := math.Copysign(1, theta) / (math.Abs(theta) + math.Sqrt(theta*theta+1))
				c := 1 / math.Sqrt(t*t+1)
				sn := t * c
				for r := range k { // A ← A·J
					arp, arq := a[r*k+p], a[r*k+q]
					a[r*k+p], a[r*k+q] = c*arp-sn*arq, sn*arp+c*arq
				}
				for r := range k { // A ← Jᵀ·A
					apr, aqr := a[p*k+r], a[q*k+r]
					a[p*k+r], a[q*k+r] = c*apr-sn*aqr, sn*apr+c*aqr
				}
				for r := range k {
					vrp, vrq := v[r*k+p], v[r*k+q]
					v[r*k+p], v[r*k+q] = c*vrp-sn*vrq, sn*vrp+c*vrq
				}
			}
		}
	}
	vals = make([]float64, k)
	for i := range k {
		vals[i] = a[i*k+i]
	}
	return vals, v
}

// polarRef is the orthogonal polar factor of p[rows×cols] computed as (P·Pᵀ)^(−1/2)·P
// (wide) or P·(Pᵀ·P)^(−1/2) (tall) with a Jacobi eigendecomposition, in plain loops.
func polarRef(p []float64, rows, cols int) []float64 {
	if rows > cols {
		return transposeRef(polarRef(transposeRef(p, rows, cols), cols, rows), cols, rows)
	}
	k := rows
	g := make([]float64, k*k)
	for i := range k {
		for j := range k {
			for c := range cols {
				g[i*k+j] += p[i*cols+c] * p[j*cols+c]
			}
		}
	}
	vals, v := symEig(g, k)
	inv := make([]float64, k*k) // V·diag(λ^−1/2)·Vᵀ
	for i := range k {
		for j := range k {
			for e := range k {
				inv[i*k+j] += v[i*k+e] * v[j*k+e] / math.Sqrt(vals[e])
			}
		}
	}
	out := make([]float64, len(p))
	for i := range k {
		for c := range cols {
			for j := range k {
				out[i*cols+c] += inv[i*k+j] * p[j*cols+c]
			}
		}
	}
	return out
}

func transposeRef(p []float64, rows, cols int) []float64 {
	out := make([]float64, len(p))
	for i := range rows {
		for j := range cols {
			out[j*rows+i] = p[i*cols+j]
		}
	}
	return out
}

// randWithSpectrum returns a rows×cols matrix with singular values sv (min(rows, cols)
// of them) in random orthonormal directions: built as Σ sv_i·u_i·v_iᵀ with Gram–Schmidt
// vectors.
func randWithSpectrum(rng *rand.Rand, rows, cols int, sv []float64) []float64 {
	ortho := func(n, m int) [][]float64 {
		var vs [][]float64
		for len(vs) < m {
			x := make([]float64, n)
			for i := range x {
				x[i] = rng.NormFloat64()
			}
			for _, u := range vs {
				var d float64
				for i := range x {
					d += x[i] * u[i]
				}
				for i := range x {
					x[i] -= d * u[i]
				}
			}
			var nn float64
			for _, e := range x {
				nn += e * e
			}
			for i := range x {
				x[i] /= math.Sqrt(nn)
			}
			vs = append(vs, x)
		}
		return vs
	}
	us, vs := ortho(rows, len(sv)), ortho(cols, len(sv))
	out := make([]float64, rows*cols)
	for k, s := range sv {
		for i := range rows {
			for j := range cols {
				out[i*cols+j] += s * us[k][i] * vs[k][j]
			}
		}
	}
	return out
}

// dimuonRef is an independent float64 Dimuon step on one matrix (the definition in
// DimuonStep's comment, written with the eigendecomposition polar factor): it returns the
// new weights and momentum, before float32 storage.
func dimuonRef(w, g, mom []float64, rows, cols, rank int, clip, beta1, damping, lr, e float64) (nw, nm []float64) {
	n := rows * cols
	nm = make([]float64, n)
	var mu float64
	for i := range nm {
		nm[i] = float64(float32(beta1*mom[i] + (1-beta1)*clip*g[i]))
		mu += nm[i] * nm[i] / float64(n)
	}
	nw = append([]float64(nil), w...)
	if mu == 0 {
		return nw, nm
	}
	p := make([]float64, n)
	for i := range rows {
		var rs float64
		for j := range cols {
			rs += nm[i*cols+j] * nm[i*cols+j]
		}
		for j := range cols {
			var cs float64
			for r := range rows {
				cs += nm[r*cols+j] * nm[r*cols+j]
			}
			p[i*cols+j] = nm[i*cols+j] / math.Pow(rs/float64(cols)+damping*mu, 0.25) / math.Pow(cs/float64(rows)+damping*mu, 0.25)
		}
	}
	o := polarRef(p, rows, cols)
	var on float64
	for _, v := range o {
		on += v * v
	}
	eta := lr * math.Pow(32/float64(rank), e)
	for i := range nw {
		nw[i] -= eta * math.Sqrt(float64(rank)) * o[i] / math.Sqrt(on)
	}
	return nw, nm
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}
