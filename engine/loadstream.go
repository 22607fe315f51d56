package engine

import (
	"errors"
	"fmt"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/safetensors"
)

// Loading streams: each weight file is mapped (safetensors.Open), and the tensors are
// placed on the device one at a time, each one's mapped pages dropped once it is placed.
// A device that takes stored bytes (device.WeightLoader) builds each matrix from the
// mapping: the GPU through its staging buffer into device memory, the CPU row by row into
// its weight format (engine.cpu_weight_format: bf16 by default). Either way the host never
// holds a float32 copy of a matrix and the model keeps no host copy (Model.W is nil). Only
// a CPU keeping float32 weights expands each tensor to float32 — one tensor at a time,
// from the mapping — and that expansion is the model (Model.W). Norms and biases are
// always float32.

// weightSlot is one tensor of a model: its name and shape in the checkpoint, whether it
// is a frozen matrix (Device.Weight: possibly narrowed) or a norm or bias (full
// precision), and where its host values and its device tensor go.
type weightSlot struct {
	name   string
	shape  []int
	matrix bool
	more   bool // a matrix a CPU in q4_k stores in q6_k, as llama.cpp's Q4_K_M (placeMore)
	host   *[]float32
	dev    *device.Tensor[float32]
}

// weightSlots lists the tensors a model of config c is made of, in checkpoint order
// (lm_head only when it is not tied to the embedding).
func weightSlots(c Config, w *Weights[float32], dw *devWeights[float32]) []weightSlot {
	D, I, V := c.Hidden, c.Intermediate, c.VocabSize
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	var s []weightSlot
	add := func(name string, matrix bool, host *[]float32, dev *device.Tensor[float32], shape ...int) {
		s = append(s, weightSlot{name: name, shape: shape, matrix: matrix, host: host, dev: dev})
	}
	more := func() { s[len(s)-1].more = true }
	add("model.embed_tokens.weight", true, &w.Embed, &dw.Embed, V, D)
	more()
	add("model.norm.weight", false, &w.FinalNorm, &dw.FinalNorm, D)
	if !c.TieEmbeddings {
		add("lm_head.weight", true, &w.LMHead, &dw.LMHead, V, D)
		more()
	}
	for i := range w.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		L, dL := &w.Layers[i], &dw.Layers[i]
		add(p+"input_layernorm.weight", false, &L.AttnNorm, &dL.AttnNorm, D)
		add(p+"self_attn.q_proj.weight", true, &L.Wq, &dL.Wq, q, D)
		add(p+"self_attn.k_proj.weight", true, &L.Wk, &dL.Wk, kv, D)
		add(p+"self_attn.v_proj.weight", true, &L.Wv, &dL.Wv, kv, D)
		if q4kMoreBits(i, len(w.Layers)) {
			more()
		}
		add(p+"self_attn.o_proj.weight", true, &L.Wo, &dL.Wo, D, q)
		if c.AttnBias {
			add(p+"self_attn.q_proj.bias", false, &L.Bq, &dL.Bq, q)
			add(p+"self_attn.k_proj.bias", false, &L.Bk, &dL.Bk, kv)
			add(p+"self_attn.v_proj.bias", false, &L.Bv, &dL.Bv, kv)
		}
		add(p+"post_attention_layernorm.weight", false, &L.MLPNorm, &dL.MLPNorm, D)
		add(p+"mlp.gate_proj.weight", true, &L.Wgate, &dL.Wgate, I, D)
		add(p+"mlp.up_proj.weight", true, &L.Wup, &dL.Wup, I, D)
		add(p+"mlp.down_proj.weight", true, &L.Wdown, &dL.Wdown, D, I)
		if q4kMoreBits(i, len(w.Layers)) {
			more()
		}
	}
	return s
}

// placeWeights checks checkpoint tensors ts (owner: the file of each, for errors)
// against config c and places them on d one at a time, calling release(name) once a
// tensor has been consumed. With d nil it only converts them to host float32 (the dw
// it returns is then empty). The host weights are nil when d took every matrix from its
// stored bytes, or keeps matrices in its own weight format (see above).
func placeWeights(c Config, d Device, ts map[string]safetensors.Tensor, owner map[string]string, release func(string)) (*Weights[float32], *devWeights[float32], error) {
	w := &Weights[float32]{Layers: make([]Layer[float32], c.Layers)}
	dw := &devWeights[float32]{Layers: make([]devLayer[float32], c.Layers)}
	var loader device.WeightLoader[float32]
	if d != nil {
		loader, _ = d.(device.WeightLoader[float32])
	}
	if loader != nil {
		defer loader.EndWeights()
	}
	// A device in host memory that declines a matrix (the CPU with float32 weights)
	// shares the host's float32 values, which are then the model's host copy.
	hostCopy := loader == nil || d.HostMemory()
	narrowed := false // some matrix is kept only in the device's weight format
	var errs []error
	slots := weightSlots(c, w, dw)
	known := make(map[string]bool, len(slots))
	for _, s := range slots {
		known[s.name] = true
	}
	for _, s := range slots {
		t, ok := ts[s.name]
		if !ok {
			errs = append(errs, fmt.Errorf("load model: tensor %s is missing", s.name))
			continue
		}
		if !sameShape(t.Shape, s.shape) {
			errs = append(errs, fmt.Errorf("load model: %s: tensor %s has shape %v, config.json implies %v", owner[s.name], s.name, t.Shape, s.shape))
			continue
		}
		if len(errs) > 0 {
			continue // keep checking names and shapes, place nothing more
		}
		placed := false
		// The matrices a q4_k model gives more bits (the embedding, the LM head, some
		// layers' v_proj and down_proj: placeMore) are quantised from float32.
		if loader != nil && s.matrix && !(s.more && cpuInQ4K(d)) {
			*s.dev, placed = loader.WeightFrom(t.DType, t.Data, s.shape[0], s.shape[1])
			narrowed = narrowed || placed && d.HostMemory()
		}
		if !placed {
			v, err := t.Float32()
			if err != nil {
				errs = append(errs, fmt.Errorf("load model: %s: %w", owner[s.name], err))
				continue
			}
			if hostCopy {
				*s.host = v
			}
			if d != nil {
				if s.matrix {
					*s.dev = placeMore(d, nil, v, s.shape[0], s.shape[1], s.more)
					if ownCopy(*s.dev) {
						*s.host, narrowed = nil, true // the device's copy is the only one
					}
				} else {
					*s.dev = place(d, v)
				}
			}
		}
		if release != nil {
			release(s.name)
		}
	}
	if _, ok := ts["lm_head.weight"]; !ok && !c.TieEmbeddings {
		errs = append(errs, fmt.Errorf("load model: tensor lm_head.weight is missing and tie_word_embeddings is false"))
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	if c.TieEmbeddings {
		w.LMHead, dw.LMHead = w.Embed, dw.Embed
	}
	for name := range ts {
		if !isIgnorable(name) && !known[name] {
			return nil, nil, fmt.Errorf("load model: %s: unexpected tensor %s (not part of a %s model with this config)", owner[name], name, c.Arch)
		}
	}
	if d != nil {
		if err := d.Err(); err != nil {
			return nil, nil, fmt.Errorf("place weights on %s: %w", d.Name(), err)
		}
	}
	if !hostCopy || narrowed {
		w = nil
	}
	return w, dw, nil
}

// loadFiles maps the weight files and builds the model on the device opts choose,
// streaming the tensors (see above).
func loadFiles(name string, cfg Config, files []string, opts ...Option) (*Model, error) {
	o := options{}
	for _, f := range opts {
		f(&o)
	}
	if o.dev == nil {
		o.dev = device.NewCPU[float32]()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tensors := map[string]safetensors.Tensor{}
	owner := map[string]string{}
	mapped := map[string]*safetensors.Mapped{}
	defer func() {
		for _, m := range mapped {
			m.Close()
		}
	}()
	for _, f := range files {
		sf, err := safetensors.Open(f)
		if err != nil {
			return nil, fmt.Errorf("load model: %w", err)
		}
		mapped[f] = sf
		for _, t := range sf.Tensors {
			if prev, dup := owner[t.Name]; dup {
				return nil, fmt.Errorf("load model: tensor %s is in both %s and %s", t.Name, prev, f)
			}
			tensors[t.Name], owner[t.Name] = t, f
		}
	}
	release := func(n string) { mapped[owner[n]].Release(tensors[n]) }
	w, dw, err := placeWeights(cfg, o.dev, tensors, owner, release)
	if err != nil {
		return nil, err
	}
	return &Model{Name: name, Cfg: cfg, W: w, dev: o.dev, dw: dw, rope: newRope(cfg, cfg.MaxPositions)}, nil
}
