package device

// Sampling and top-k on the host device: drawing tokens from logits rows.

import (
	"math"
	"sort"

	"github.com/tuft-go/tuft/engine/kern"
)

// Sample implements Device.
func (*CPU[T]) Sample(logits Tensor[T], cols int, draws []Draw) ([]int32, []float32) {
	toks, lps := make([]int32, len(draws)), make([]float32, len(draws))
	// Consecutive draws from one row under the same parameters (the samples of a prompt,
	// alternative prompt tokens) share the distribution: computed once. The distinct
	// ones (a batch's sequences: a log-softmax over the vocabulary each) are computed in
	// parallel, then drawn from in order.
	var starts []int
	for i, d := range draws {
		if i == 0 || d.Row != draws[i-1].Row || d.Temperature != draws[i-1].Temperature || d.TopK != draws[i-1].TopK || d.TopP != draws[i-1].TopP {
			starts = append(starts, i)
		}
	}
	ps := make([]*candidates, len(starts))
	parallel(len(starts), func(g int) {
		d := draws[starts[g]]
		ps[g] = prepare(logits.h[d.Row*cols:(d.Row+1)*cols], d)
	})
	g := -1
	for i, d := range draws {
		if g+1 < len(starts) && starts[g+1] == i {
			g++
		}
		toks[i], lps[i] = ps[g].choose(d.U)
	}
	return toks, lps
}

// candidates is the distribution a draw picks from: log-probabilities at the draw's
// temperature, and the tokens that top-k and top-p leave (greedy ≥ 0: the argmax).
type candidates struct {
	lp     []float64
	cand   []int
	p      []float64 // exp(lp) of each candidate
	tot    float64   // their sum
	greedy int
	// greedyLP is the greedy token's log-probability (lp is nil then).
	greedyLP float64
}

// prepare computes what draws under d from logits pick from.
func prepare[T Float](logits []T, d Draw) *candidates {
	temp := d.Temperature
	if temp == 0 {
		temp = 1
	}
	V := len(logits)
	if d.Temperature == 0 {
		return prepareGreedy(logits)
	}
	lp := make([]float64, V)
	mx := math.Inf(-1)
	for i, v := range logits {
		lp[i] = float64(v) / temp
		mx = math.Max(mx, lp[i])
	}
	// Σ exp(lp − max) with the vectorised exponential (float32 on a float32 device; the
	// argument is formed in float64 first, so a low temperature loses nothing to it, and
	// each term's error is a few parts in 10⁸), summed in float64.
	e := make([]T, V)
	for i, v := range lp {
		e[i] = T(v - mx)
	}
	kern.Exp(e, e, 1, 0)
	s := sum64(e)
	lse := mx + math.Log(s)
	for i := range lp {
		lp[i] -= lse
	}
	idx := make([]int, V)
	for i := range idx {
		idx[i] = i
	}
	limited := (d.TopK > 0 && d.TopK < V) || d.TopP < 1
	cand := idx
	if limited {
		sort.Slice(idx, func(a, b int) bool { return lp[idx[a]] > lp[idx[b]] || (lp[idx[a]] == lp[idx[b]] && idx[a] < idx[b]) })
		if d.TopK > 0 && d.TopK < V {
			cand = idx[:d.TopK]
		}
		if d.TopP < 1 {
			var tot float64
			for _, i := range cand {
				tot += math.Exp(lp[i])
			}
			var cum float64
			keep := len(cand)
			for j, i := range cand {
				cum += math.Exp(lp[i]) / tot
				if cum >= d.TopP {
					keep = j + 1
					break
				}
			}
			cand = cand[:keep]
		}
	}
	c := &candidates{lp: lp, cand: cand, p: make([]float64, len(cand)), greedy: -1}
	for j, i := range cand {
		c.p[j] = math.Exp(lp[i])
		c.tot += c.p[j]
	}
	return c
}

// prepareGreedy is prepare at temperature 0: the argmax and its log-probability, the
// same bits as the general path's (lp[i] = logit − lse, the first of equal maxima)
// without its row of V log-probabilities. Subtracting lse keeps the logits' order (their
// differences are float32 steps, far above float64's rounding), so the argmax is taken
// on the logits; a NaN lse (a NaN or infinite logit) made every comparison false there,
// choosing token 0, and does here.
func prepareGreedy[T Float](logits []T) *candidates {
	if len(logits) == 0 {
		return &candidates{greedyLP: math.NaN()}
	}
	top := kern.Max(logits)
	mx := float64(top)
	e := make([]T, len(logits))
	kern.Exp(e, logits, 1, -top) // v − max is exact in T where the largest terms matter
	lse := mx + math.Log(sum64(e))
	best := 0
	if !math.IsNaN(lse) {
		// The first largest logit (−0 and +0 equal), as a scan keeping strictly larger
		// ones finds it.
		for i, v := range logits {
			if v == top {
				best = i
				break
			}
		}
	}
	return &candidates{greedy: best, greedyLP: float64(logits[best]) - lse}
}

// choose picks the token the uniform variate u selects (u is unused when greedy).
func (c *candidates) choose(u float64) (int32, float32) {
	lp, cand := c.lp, c.cand
	if c.greedy >= 0 {
		return int32(c.greedy), float32(c.greedyLP)
	}
	r := u * c.tot
	for j, i := range cand {
		r -= c.p[j]
		if r <= 0 {
			return int32(i), float32(lp[i])
		}
	}
	last := cand[len(cand)-1]
	return int32(last), float32(lp[last])
}

// TopK implements Device.
func (*CPU[T]) TopK(logp Tensor[T], cols int, rows []int32, k int) ([]int32, []T) {
	k = min(k, cols)
	toks, vals := make([]int32, len(rows)*k), make([]T, len(rows)*k)
	idx := make([]int, cols)
	for ri, r := range rows {
		row := logp.h[int(r)*cols : int(r+1)*cols]
		for i := range idx {
			idx[i] = i
		}
		sort.Slice(idx, func(a, b int) bool {
			return row[idx[a]] > row[idx[b]] || (row[idx[a]] == row[idx[b]] && idx[a] < idx[b])
		})
		for j := 0; j < k; j++ {
			toks[ri*k+j], vals[ri*k+j] = int32(idx[j]), row[idx[j]]
		}
	}
	return toks, vals
}
