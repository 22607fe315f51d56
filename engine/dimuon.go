package engine

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/tuft-go/tuft/engine/kern"
)

// Dimuon's internal constants. The SDK documents the matrix-sign iteration count and the
// normalisation epsilon as internal; these are TuFT's (docs/compatibility.md, Losses and
// optimizers).
const (
	// Newton–Schulz: quintic steps (Muon's coefficients) lift small singular values
	// fast, then cubic steps X ← 1.5X − 0.5·XXᵀX converge to 1 quadratically. After
	// Frobenius normalisation every singular value in [3e-6, 1] ends within 1e-9 of 1 in
	// exact arithmetic; float64, iterating on the Gram matrix, adds about 1e-16·cond².
	dimuonQuinticSteps = 10
	dimuonCubicSteps   = 5
	// dimuonRefRank is the rank the learning-rate correction is relative to.
	dimuonRefRank = 32
)

var dimuonQuintic = [3]float64{3.4445, -4.7750, 2.0315}

// DimuonStep applies one Dimuon step to an adapter created with the dimuon optimizer and
// zeroes its gradients. TuFT's reading of Tinker's description (momentum, matrix sign by
// Newton–Schulz, row/column damping, a learning rate for a direction of Frobenius norm
// √rank, rank correction), for every LoRA matrix X (A: r×in, B: out×r) with gradient G:
//
//	c = min(1, grad_clip_norm/(‖G_all‖+1e-6)) when grad_clip_norm > 0, else 1
//	M ← β1·M + (1−β1)·c·G                             (stored as float32)
//	μ = mean(M²); ρ_i = mean_j M_ij²; γ_j = mean_i M_ij²
//	P_ij = M_ij · (ρ_i + δμ)^(−1/4) · (γ_j + δμ)^(−1/4)    (δ = damping)
//	O = msign(P) by Newton–Schulz on P/‖P‖_F
//	X ← X − η·√r·O/‖O‖_F,   η = lr·(32/r)^e          (e = rank_lr_correction_exponent)
//
// ‖G_all‖ is the global norm over every LoRA matrix; r is the adapter's rank. A matrix
// whose momentum is zero does not move. The arithmetic is float64 on the host: on a GPU
// the adapter is copied to the host and back.
//
// Like OptimStep it is all or nothing: if the gradients, or any new weight or momentum,
// would not be finite, the weights, momentum and step count stay as they were and the
// error says why; non-finite gradients are then discarded, since no step could use them.
func (m *Model) DimuonStep(ctx context.Context, a *Adapter, p DimuonParams) (map[string]float64, error) {
	if a == nil {
		return nil, Inputf("optim_step needs an adapter")
	}
	if oc := a.Config.Optimizer.Normalize(); oc.Type != OptimizerDimuon {
		return nil, Inputf("optim_step: this adapter trains with %s; dimuon optimizer_params do not apply (the optimizer is chosen when the model is created)", oc)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := m.AdapterToHost(a); err != nil {
		return nil, fmt.Errorf("optim_step: %w", err)
	}
	mats := dimuonMatrices(a)
	var ss float64
	for _, x := range mats {
		for _, v := range x.g {
			ss += float64(v) * float64(v)
		}
	}
	norm := math.Sqrt(ss)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		for _, x := range mats {
			clear(x.g)
		}
		if err := m.AdapterFromHost(a); err != nil {
			return nil, fmt.Errorf("optim_step: %w", err)
		}
		return nil, Inputf("optim_step: the accumulated gradients are not finite (norm %g); nothing was applied and they were discarded: "+
			"run forward_backward again (lower the learning rate or check the loss inputs)", norm)
	}
	clip := 1.0
	if p.GradClipNorm > 0 {
		if coef := p.GradClipNorm / (norm + 1e-6); coef < 1 {
			clip = coef
		}
	}
	r := a.Config.Rank
	eta := p.LearningRate * math.Pow(dimuonRefRank/float64(r), p.RankLRCorrectionExponent)
	// New weights and momenta go to scratch first, so a non-finite result changes nothing.
	nw, nm := make([][]float32, len(mats)), make([][]float32, len(mats))
	finite := make([]bool, len(mats))
	parallelEach(len(mats), func(i int) {
		x := mats[i]
		nw[i], nm[i] = append([]float32(nil), x.w...), make([]float32, len(x.m))
		dimuonMatrix(nw[i], x.g, x.m, nm[i], x.rows, x.cols, r, clip, p.Beta1, p.Damping, eta)
		finite[i] = allFinite(nw[i]) && allFinite(nm[i])
	})
	for i, ok := range finite {
		if !ok {
			return nil, Inputf("optim_step: the Dimuon step would make LoRA matrix %d (%d×%d) non-finite; nothing was applied", i, mats[i].rows, mats[i].cols)
		}
	}
	for i, x := range mats {
		copy(x.w, nw[i])
		copy(x.m, nm[i])
		clear(x.g)
	}
	if err := m.AdapterFromHost(a); err != nil {
		return nil, fmt.Errorf("optim_step: %w", err)
	}
	a.Step++
	return map[string]float64{"grad_norm:max": norm, "learning_rate:max": p.LearningRate}, nil
}

// dimuonMat is one LoRA matrix with its gradient and momentum (host slices).
type dimuonMat struct {
	w, g, m    []float32
	rows, cols int
}

func dimuonMatrices(a *Adapter) []dimuonMat {
	ws, gs, ms := a.W.pairs(), a.Grad.pairs(), a.M.pairs()
	out := make([]dimuonMat, 0, 2*len(ws))
	for i, w := range ws {
		r := len(w.A) / w.In
		out = append(out, dimuonMat{w.A, gs[i].A, ms[i].A, r, w.In}, dimuonMat{w.B, gs[i].B, ms[i].B, w.Out, r})
	}
	return out
}

// parallelEach runs f(0…n−1) on up to GOMAXPROCS goroutines. Each call touches its own
// matrix only, so the result does not depend on the schedule.
func parallelEach(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

func allFinite(x []float32) bool {
	for _, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return false
		}
	}
	return true
}

// dimuonMatrix computes one matrix's step (see DimuonStep): the new momentum from mom and
// g into newMom, and the update applied to w in place.
func dimuonMatrix(w, g, mom, newMom []float32, rows, cols, rank int, clip, beta1, damping, eta float64) {
	n := rows * cols
	x := make([]float64, n)
	var ms float64
	for i := range n {
		v := float32(beta1*float64(mom[i]) + (1-beta1)*clip*float64(g[i]))
		newMom[i] = v
		x[i] = float64(v)
		ms += x[i] * x[i]
	}
	if ms == 0 {
		return
	}
	d := damping * ms / float64(n)
	rowF, colF := make([]float64, rows), make([]float64, cols)
	for i := range rows {
		for j := range cols {
			v := x[i*cols+j]
			rowF[i] += v * v
			colF[j] += v * v
		}
	}
	for i := range rowF {
		rowF[i] = math.Pow(rowF[i]/float64(cols)+d, -0.25)
	}
	for j := range colF {
		colF[j] = math.Pow(colF[j]/float64(rows)+d, -0.25)
	}
	for i := range rows {
		for j := range cols {
			x[i*cols+j] *= rowF[i] * colF[j]
		}
	}
	o := matrixSign(x, rows, cols)
	var on float64
	for _, v := range o {
		on += v * v
	}
	if on == 0 {
		return
	}
	s := eta * math.Sqrt(float64(rank)/on)
	for i, v := range o {
		w[i] = float32(float64(w[i]) - s*v)
	}
}

// matrixSign returns the orthogonal polar factor of p[rows×cols] (U·Vᵀ of its SVD, the
// matrix sign) by Newton–Schulz iteration on X₀ = p/‖p‖_F: dimuonQuinticSteps steps of
// X ← aX + (bG + cG²)X with G = XXᵀ, then dimuonCubicSteps of X ← 1.5X − 0.5GX (for a
// tall matrix, G = XᵀX multiplies from the right).
//
// Every iterate is Xₖ = Cₖ·X₀ (tall: X₀·Cₖ) with Cₖ a polynomial in G₀, so the
// iteration runs on k×k matrices (k = min(rows, cols), the LoRA rank): with
// Q = aI + bG + cG², C ← Q·C and G ← Q·G·Q (Q commutes with G). That is the same
// iteration as on X itself, for two products with X in all instead of two per step.
func matrixSign(p []float64, rows, cols int) []float64 {
	var fn float64
	for _, v := range p {
		fn += v * v
	}
	fn = math.Sqrt(fn)
	x := make([]float64, len(p))
	if fn == 0 {
		return x
	}
	for i, v := range p {
		x[i] = v / fn
	}
	k := min(rows, cols)
	g, c, q, t := make([]float64, k*k), make([]float64, k*k), make([]float64, k*k), make([]float64, k*k)
	if rows <= cols {
		kern.MatMulNT(g, x, x, k, k, cols, false) // G₀ = X₀·X₀ᵀ
	} else {
		kern.MatMulTN(g, x, x, k, k, rows, false) // G₀ = X₀ᵀ·X₀
	}
	for i := range k {
		c[i*k+i] = 1
	}
	step := func(a, b, cc float64) {
		kern.MatMulNN(q, g, g, k, k, k, false) // Q = aI + bG + cG²
		for i := range q {
			q[i] = b*g[i] + cc*q[i]
		}
		for i := range k {
			q[i*k+i] += a
		}
		kern.MatMulNN(t, q, c, k, k, k, false) // C ← Q·C
		c, t = t, c
		kern.MatMulNN(t, q, g, k, k, k, false) // G ← Q·G·Q
		kern.MatMulNN(g, t, q, k, k, k, false)
	}
	for range dimuonQuinticSteps {
		step(dimuonQuintic[0], dimuonQuintic[1], dimuonQuintic[2])
	}
	for range dimuonCubicSteps {
		step(1.5, -0.5, 0)
	}
	o := make([]float64, len(x))
	if rows <= cols {
		kern.MatMulNN(o, c, x, k, cols, k, false) // O = C·X₀
	} else {
		kern.MatMulNN(o, x, c, rows, k, k, false) // O = X₀·C
	}
	return o
}
