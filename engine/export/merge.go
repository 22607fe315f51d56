package export

import (
	"fmt"

	"github.com/tuft-go/tuft/engine"
)

// merger gives the merged model's weights one tensor at a time: W + (alpha/r)·B·A for
// an adapted projection (into a fresh slice: the base weights are shared by every
// adapter and stay untouched), the base tensor itself otherwise. a may be nil (the base
// model alone).
type merger struct {
	m *engine.Model
	a *engine.Adapter
}

// proj is layer l's projection p, merged, with its [out, in] shape.
func (g merger) proj(l int, p engine.Proj) ([]float32, int, int) {
	L := &g.m.W.Layers[l]
	base := [...][]float32{L.Wq, L.Wk, L.Wv, L.Wo, L.Wgate, L.Wup, L.Wdown}[p]
	var pair *engine.LoraPair[float32]
	if g.a != nil {
		pair = g.a.W.Layers[l][p]
	}
	out, in := projDims(g.m.Cfg, p)
	return addLoRA(base, pair, g.scale()), out, in
}

// projDims is the [out, in] shape of projection p.
func projDims(c engine.Config, p engine.Proj) (int, int) {
	switch p {
	case engine.ProjQ:
		return c.Heads * c.HeadDim, c.Hidden
	case engine.ProjK, engine.ProjV:
		return c.KVHeads * c.HeadDim, c.Hidden
	case engine.ProjO:
		return c.Hidden, c.Heads * c.HeadDim
	case engine.ProjGate, engine.ProjUp:
		return c.Intermediate, c.Hidden
	}
	return c.Hidden, c.Intermediate
}

// lmHead is the merged output matrix [V, D], and whether it differs from the embedding
// matrix (an lm_head LoRA unties tied embeddings).
func (g merger) lmHead() ([]float32, bool) {
	var pair *engine.LoraPair[float32]
	if g.a != nil {
		pair = g.a.W.LMHead
	}
	w := addLoRA(g.m.W.LMHead, pair, g.scale())
	return w, pair != nil || !g.m.Cfg.TieEmbeddings
}

func (g merger) scale() float32 {
	if g.a == nil {
		return 0
	}
	return g.a.W.Scale
}

// addLoRA returns w + scale·B·A (w itself when pair is nil).
func addLoRA(w []float32, pair *engine.LoraPair[float32], scale float32) []float32 {
	if pair == nil {
		return w
	}
	r := len(pair.A) / pair.In
	out := make([]float32, len(w))
	copy(out, w)
	for o := range pair.Out {
		row := out[o*pair.In : (o+1)*pair.In]
		for k := range r {
			b := scale * pair.B[o*r+k]
			if b == 0 {
				continue
			}
			a := pair.A[k*pair.In : (k+1)*pair.In]
			for i, x := range a {
				row[i] += b * x
			}
		}
	}
	return out
}

// loadAdapter reads the adapter of a checkpoint directory for m.
func loadAdapter(m *engine.Model, dir string) (*engine.Adapter, error) {
	a, err := m.LoadAdapter(dir, false)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	return a, nil
}
