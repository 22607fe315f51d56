package engine

import (
	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// WeightBytes is the memory the model's base matrices take on the CPU (a CPU weight
// format's blocks, or 4 bytes a weight in f32), and the bytes one forward pass reads of
// them: every layer matrix and the LM head (the embedding table only gives a row per
// token, unless it is also the LM head). `tuft-bench engine` divides decode's speed by
// it: with a GGUF file's mixed blocks (q4_k on a Q4_K_M file) no per-weight figure gives
// it.
func (m *Model) WeightBytes() (total, perPass int64) {
	var layers int64
	for _, l := range m.dw.Layers {
		for _, t := range []device.Tensor[float32]{l.Wq, l.Wk, l.Wv, l.Wo, l.Wgate, l.Wup, l.Wdown} {
			layers += tensorBytes(t)
		}
	}
	embed, head := tensorBytes(m.dw.Embed), tensorBytes(m.dw.LMHead)
	total, perPass = embed+layers, layers+head
	if !m.Cfg.TieEmbeddings {
		total += head
	}
	return total, perPass
}

func tensorBytes(t device.Tensor[float32]) int64 {
	if fz := t.Frozen(); fz != nil {
		return int64(fz.Bytes())
	}
	return 4 * int64(t.Len())
}

// LayerMatrices are layer i's base matrices as the CPU stores them (q, k, v, o, gate,
// up, down; HuggingFace's row order), nil where one is not stored frozen (f32, another
// device): the real-model suite compares the blocks of two loads with them.
func (m *Model) LayerMatrices(i int) map[string]*kern.Frozen {
	l := m.dw.Layers[i]
	return map[string]*kern.Frozen{"q": l.Wq.Frozen(), "k": l.Wk.Frozen(), "v": l.Wv.Frozen(), "o": l.Wo.Frozen(),
		"gate": l.Wgate.Frozen(), "up": l.Wup.Frozen(), "down": l.Wdown.Frozen()}
}
