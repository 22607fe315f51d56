package devicetest

import (
	"math/rand/v2"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
)

// HeadCase is a fused loss head's inputs: Rows × D hidden states, a V × D unembedding, and
// each row's targets (0 to 3 of them, repeats allowed) with a gradient per target.
type HeadCase struct {
	Rows, D, V int
	H, W, G    []float64
	Off, Tok   []int32
}

// NewHeadCase draws a head's inputs (values already float32) from rng.
func NewHeadCase(rng *rand.Rand, rows, d, v int) HeadCase {
	c := &checker{rng: rng}
	hc := HeadCase{Rows: rows, D: d, V: v, H: f32(c.rand(rows*d, 1)), W: f32(c.rand(v*d, 0.5)), Off: []int32{0}}
	for r := 0; r < rows; r++ {
		for k := rng.IntN(4); k > 0; k-- {
			hc.Tok = append(hc.Tok, int32(rng.IntN(v)))
		}
		hc.Off = append(hc.Off, int32(len(hc.Tok)))
	}
	hc.G = f32(c.rand(len(hc.Tok), 1))
	return hc
}

// HeadReference computes a head in float64 the long way, with the full logits: the
// targets' log-probabilities and dL/dH = (Σⱼ gⱼ·onehot(tⱼ) − Σⱼ gⱼ·softmax)·W.
func HeadReference(hc HeadCase) (logp, dh []float64) {
	ref := device.NewCPU[float64]()
	R, D, V := hc.Rows, hc.D, hc.V
	lg := make([]float64, R*V)
	ref.MatMulNT(h64(lg), h64(hc.H), h64(hc.W), R, V, D, false)
	ref.LogSoftmax(h64(lg), R, V)
	logp = make([]float64, len(hc.Tok))
	g := &device.XentGrad{}
	for r := 0; r < R; r++ {
		var s float64
		for j := hc.Off[r]; j < hc.Off[r+1]; j++ {
			logp[j] = lg[r*V+int(hc.Tok[j])]
			s += hc.G[j]
			g.Idx = append(g.Idx, int64(r*V)+int64(hc.Tok[j]))
			g.Vals = append(g.Vals, hc.G[j])
		}
		g.Rows, g.Sums = append(g.Rows, int32(r)), append(g.Sums, s)
	}
	dl := make([]float64, R*V)
	ref.XentBack(h64(dl), h64(lg), V, g)
	dh = make([]float64, R*D)
	ref.MatMulNN(h64(dh), h64(dl), h64(hc.W), R, D, V, false)
	return logp, dh
}

// head checks LossHead and LossHeadBack against HeadReference, with W as an activation
// and as a frozen weight (which the device may narrow), over several chunks of rows.
func (c *checker) head(t *testing.T) {
	for _, sz := range [][3]int{{300, 40, 97}, {3, 16, 300}} {
		hc := NewHeadCase(c.rng, sz[0], sz[1], sz[2])
		wantLP, wantDH := HeadReference(hc)
		for _, weight := range []bool{false, true} {
			tol := c.tol.Product
			w := c.up(hc.W)
			if weight {
				tol = c.tol.Weight
				wf := make([]float32, len(hc.W))
				for i, x := range hc.W {
					wf[i] = float32(x)
				}
				w = c.d.Weight(wf)
			}
			h := &device.Head[float32]{H: c.up(hc.H), W: w, Rows: hc.Rows, D: hc.D, V: hc.V,
				Off: c.d.Ints(hc.Off), Tok: c.d.Ints(hc.Tok), LogP: c.d.Alloc(len(hc.Tok)), E: c.d.Alloc(hc.Rows * hc.D)}
			c.d.LossHead(h)
			dh := c.d.Alloc(hc.Rows * hc.D)
			c.d.LossHeadBack(h, dh, c.up(hc.G))
			c.err("head")
			c.near("head logprobs", c.down(h.LogP), wantLP, tol)
			c.near("head dH", c.down(dh), wantDH, tol)
			// Without E (a forward-only pass) the log-probabilities are the same.
			h2 := *h
			h2.LogP, h2.E = c.d.Alloc(len(hc.Tok)), device.Tensor[float32]{}
			c.d.LossHead(&h2)
			c.near("head logprobs without E", c.down(h2.LogP), c.down(h.LogP), 0)
			for _, x := range []device.Tensor[float32]{h.H, h.LogP, h.E, dh, h2.LogP} {
				c.d.Free(x)
			}
			c.d.FreeInts(h.Off)
			c.d.FreeInts(h.Tok)
			if !weight {
				c.d.Free(w)
			}
		}
	}
	c.err("head")
}
