package devicetest

import (
	"math/rand/v2"
	"testing"

	"github.com/tuft-go/tuft/engine/device"
)

// HeadCase is a fused loss head's inputs: Rows × D hidden states, a V × D unembedding,
// each row's targets (0 to 3 of them, repeats allowed) with a gradient per target, and
// LoRA runs on the unembedding (rows [Start, Start+N), Z N × R, B V × R).
type HeadCase struct {
	Rows, D, V int
	H, W, G    []float64
	Off, Tok   []int32
	Runs       []HeadRun
}

// HeadRun is one LoRA run of a HeadCase.
type HeadRun struct {
	Start, N, R int
	Z, B        []float64
}

// NewHeadCase draws a head's inputs (values already float32) from rng, with a LoRA run
// of rank 3 over rows [1, rows/2) and one of rank 5 over [rows/2+2, rows) when lora.
func NewHeadCase(rng *rand.Rand, rows, d, v int, lora bool) HeadCase {
	c := &checker{rng: rng}
	hc := HeadCase{Rows: rows, D: d, V: v, H: f32(c.rand(rows*d, 1)), W: f32(c.rand(v*d, 0.5)), Off: []int32{0}}
	for r := 0; r < rows; r++ {
		for k := rng.IntN(4); k > 0; k-- {
			hc.Tok = append(hc.Tok, int32(rng.IntN(v)))
		}
		hc.Off = append(hc.Off, int32(len(hc.Tok)))
	}
	hc.G = f32(c.rand(len(hc.Tok), 1))
	if lora {
		for _, run := range []HeadRun{{Start: 1, N: rows/2 - 1, R: 3}, {Start: rows/2 + 2, N: rows - rows/2 - 2, R: 5}} {
			run.Z, run.B = f32(c.rand(run.N*run.R, 1)), f32(c.rand(v*run.R, 0.3))
			hc.Runs = append(hc.Runs, run)
		}
	}
	return hc
}

// HeadWant is what a head gives: the targets' log-probabilities, dL/dH, and per LoRA run
// dL/dZ and dL/dB.
type HeadWant struct {
	LogP, DH []float64
	DZ, DB   [][]float64
}

// HeadReference computes a head in float64 the long way, with the full logits:
// dL/dlogits = Σⱼ gⱼ·onehot(tⱼ) − Σⱼ gⱼ·softmax, then dL/dH = dL/dlogits·W and, per run,
// dL/dZ = dL/dlogits·B and dL/dB = dL/dlogitsᵀ·Z.
func HeadReference(hc HeadCase) HeadWant {
	ref := device.NewCPU[float64]()
	R, D, V := hc.Rows, hc.D, hc.V
	lg := make([]float64, R*V)
	ref.MatMulNT(h64(lg), h64(hc.H), h64(hc.W), R, V, D, false)
	for _, run := range hc.Runs {
		ref.MatMulNT(h64(lg[run.Start*V:(run.Start+run.N)*V]), h64(run.Z), h64(run.B), run.N, V, run.R, true)
	}
	ref.LogSoftmax(h64(lg), R, V)
	var w HeadWant
	w.LogP = make([]float64, len(hc.Tok))
	g := &device.XentGrad{}
	for r := 0; r < R; r++ {
		var s float64
		for j := hc.Off[r]; j < hc.Off[r+1]; j++ {
			w.LogP[j] = lg[r*V+int(hc.Tok[j])]
			s += hc.G[j]
			g.Idx = append(g.Idx, int64(r*V)+int64(hc.Tok[j]))
			g.Vals = append(g.Vals, hc.G[j])
		}
		g.Rows, g.Sums = append(g.Rows, int32(r)), append(g.Sums, s)
	}
	dl := make([]float64, R*V)
	ref.XentBack(h64(dl), h64(lg), V, g)
	w.DH = make([]float64, R*D)
	ref.MatMulNN(h64(w.DH), h64(dl), h64(hc.W), R, D, V, false)
	for _, run := range hc.Runs {
		rows := dl[run.Start*V : (run.Start+run.N)*V]
		dz, db := make([]float64, run.N*run.R), make([]float64, V*run.R)
		ref.MatMulNN(h64(dz), h64(rows), h64(run.B), run.N, run.R, V, false)
		ref.MatMulTN(h64(db), h64(rows), h64(run.Z), V, run.R, run.N, false)
		w.DZ, w.DB = append(w.DZ, dz), append(w.DB, db)
	}
	return w
}

// head checks LossHead, LossHeadBack and LossHeadLoraGrad against HeadReference, with W
// as an activation and as a frozen weight (which the device may narrow), over several
// chunks of rows, without and with LoRA runs on the unembedding.
func (c *checker) head(t *testing.T) {
	for _, sz := range [][3]int{{300, 40, 97}, {3, 16, 300}, {290, 24, 71}} {
		hc := NewHeadCase(c.rng, sz[0], sz[1], sz[2], sz[0] == 290)
		want := HeadReference(hc)
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
				Off: c.d.Ints(hc.Off), Tok: c.d.Ints(hc.Tok), LogP: c.d.Alloc(len(hc.Tok)), E: c.d.Alloc(hc.Rows * hc.D),
				LSE: c.d.Alloc(hc.Rows)}
			for _, run := range hc.Runs {
				h.Lora = append(h.Lora, device.HeadLora[float32]{Start: run.Start, N: run.N, R: run.R, Z: c.up(run.Z), B: c.up(run.B),
					F: c.d.Alloc(run.N * run.R), DB: c.d.Alloc(hc.V * run.R)})
			}
			c.d.LossHead(h)
			dh, g := c.d.Alloc(hc.Rows*hc.D), c.up(hc.G)
			c.d.LossHeadBack(h, dh, g)
			c.d.LossHeadLoraGrad(h, g)
			c.err("head")
			c.near("head logprobs", c.down(h.LogP), want.LogP, tol)
			c.near("head dH", c.down(dh), want.DH, tol)
			for k, l := range h.Lora {
				// dL/dZ is LossHeadBack's formula with B for W and F for E.
				dz := c.d.Alloc(l.N * l.R)
				c.d.LossHeadBack(&device.Head[float32]{W: l.B, E: l.F, Rows: l.N, D: l.R, V: hc.V, Off: h.Off.Slice(l.Start, l.Start+l.N+1), Tok: h.Tok}, dz, g)
				c.near("head LoRA dZ", c.down(dz), want.DZ[k], tol)
				c.near("head LoRA dB", c.down(l.DB), want.DB[k], tol)
				for _, x := range []device.Tensor[float32]{dz, l.Z, l.B, l.F, l.DB} {
					c.d.Free(x)
				}
			}
			// Without E (a forward-only pass) the log-probabilities are the same.
			h2 := *h
			h2.LogP, h2.E, h2.LSE = c.d.Alloc(len(hc.Tok)), device.Tensor[float32]{}, device.Tensor[float32]{}
			h2.Lora = nil
			if len(h.Lora) == 0 {
				c.d.LossHead(&h2)
				c.near("head logprobs without E", c.down(h2.LogP), c.down(h.LogP), 0)
			}
			for _, x := range []device.Tensor[float32]{h.H, h.LogP, h.E, h.LSE, dh, g, h2.LogP} {
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
