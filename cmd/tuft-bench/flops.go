package main

import (
	"fmt"
	"time"

	"github.com/tuft-go/tuft/engine"
)

// The arithmetic and memory traffic of the benchmarked work, from the model's shape: what
// the figures are divided by to read them as fractions of the machine.

// layerParams is one decoder layer's matrix parameters (q, k, v, o, gate, up, down).
func layerParams(c engine.Config) float64 {
	q := c.Heads * c.HeadDim
	kv := c.KVHeads * c.HeadDim
	return float64(c.Hidden*(q+2*kv) + q*c.Hidden + 3*c.Hidden*c.Intermediate)
}

// totalParams counts every weight: embedding, layers (norms included), final norm, and
// the LM head when it is not the embedding.
func totalParams(c engine.Config) float64 {
	p := float64(c.VocabSize*c.Hidden) + float64(c.Layers)*(layerParams(c)+float64(2*c.Hidden)) + float64(c.Hidden)
	if c.AttnBias {
		p += float64(c.Layers * (c.Heads + 2*c.KVHeads) * c.HeadDim)
	}
	if !c.TieEmbeddings {
		p += float64(c.VocabSize * c.Hidden)
	}
	return p
}

// readParams is what one forward pass reads in full: every layer matrix and the LM head
// (the embedding table only gives one row per token).
func readParams(c engine.Config) float64 {
	return float64(c.Layers)*layerParams(c) + float64(c.VocabSize*c.Hidden)
}

// ppFLOPs is prompt processing's arithmetic: 2 FLOPs per matrix weight per token, the
// LM head on the last token only (both sides compute only its logits), and attention's
// two products (QKᵀ and PV) over the causal triangle.
func ppFLOPs(c engine.Config, t int) float64 {
	T := float64(t)
	attn := 2 * 2 * float64(c.Layers) * (T * (T + 1) / 2) * float64(c.Heads*c.HeadDim)
	return 2*T*float64(c.Layers)*layerParams(c) + 2*float64(c.VocabSize*c.Hidden) + attn
}

// gemmFraction fills a side's training share of the machine's measured GEMM peak: the
// CPU's (Machine), or on a GPU the card's bfloat16 products (the engine side's
// DeviceGEMMTFlops, the ceiling of both sides: their MFU against what the card measured).
func gemmFraction(s *benchSide, r *benchReport) {
	if r.Machine != nil && r.Machine.GEMMGFlops > 0 && s.Train.MedianS > 0 {
		s.Train.GEMMFraction = r.TrainFLOPs / s.Train.MedianS / (r.Machine.GEMMGFlops * 1e9)
	}
	if r.Machine == nil && r.Go.DeviceGEMMTFlops > 0 && s.Train.MedianS > 0 {
		s.Train.GEMMFraction = r.TrainFLOPs / s.Train.MedianS / (r.Go.DeviceGEMMTFlops * 1e12)
	}
	if t := s.Train; len(t.GEMMBeside) == len(t.StepS) && len(t.StepS) > 0 {
		shares := make([]float64, len(t.StepS))
		for i, dt := range t.StepS {
			shares[i] = r.TrainFLOPs / dt / (t.GEMMBeside[i] * 1e9)
		}
		s.Train.GEMMFractionBeside = median(shares)
	}
}

// loraStepFLOPs is the arithmetic of one LoRA training step on t tokens with rank r on
// all seven projections (the forward and backward passes; AdamW's few FLOPs per adapter
// weight are left out):
//
//	4·t·P + 6·t·Pr + 12·L·(t(t+1)/2)·Hq·hd
//
// P is the frozen matrices' weights (every layer's q, k, v, o, gate, up, down and the LM
// head): 2 FLOPs per weight per token forward and 2 backward for the input gradient (no
// weight gradient: they are frozen). Pr = L·r·Σ(in+out) over the seven projections is the
// adapters' weights: 2 forward, 2 for the input gradient, 2 for their weight gradient.
// Attention's two products (QKᵀ, PV) over the causal triangle cost 4 FLOPs per head
// dimension per (query, key) pair forward and twice that backward. Recomputation an
// implementation chooses (activation checkpointing) is not counted: this is the work
// the step needs, so the fraction of the GEMM peak is comparable between implementations.
func loraStepFLOPs(c engine.Config, t, r int) float64 {
	T := float64(t)
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	P := float64(c.Layers)*layerParams(c) + float64(c.VocabSize*c.Hidden)
	io := (c.Hidden + q) + 2*(c.Hidden+kv) + (q + c.Hidden) + 2*(c.Hidden+c.Intermediate) + (c.Intermediate + c.Hidden)
	Pr := float64(c.Layers * r * io)
	attn := 12 * float64(c.Layers) * (T * (T + 1) / 2) * float64(q)
	return 4*T*P + 6*T*Pr + attn
}

// deviceGEMMSize is the side of deviceGEMMPeak's products on a GPU (1.1 TFLOP each).
const deviceGEMMSize = 8192

// deviceGEMMPeak is a GPU's bfloat16 product rate in TFLOP/s: W·Wᵀ for one n×n device
// weight W (bfloat16 on both sides, so no cast runs), float32 output, 20 products back to back then one
// download, the best of 3 such rounds after 2 warm-up products. Random values (a product
// of zeros runs faster on these cards).
func deviceGEMMPeak(d engine.Device, n int) (float64, error) {
	v := make([]float32, n*n)
	for i := range v {
		v[i] = float32(int32(uint32(i)*2654435761)>>8) / (1 << 23)
	}
	w := d.Weight(v) // both operands: W·Wᵀ
	c := d.Alloc(n * n)
	defer func() { d.Free(w); d.Free(c) }()
	one := make([]float32, 1)
	best := 0.0
	for round := -1; round < 3; round++ {
		reps := 20
		if round < 0 {
			reps = 2
		}
		t0 := time.Now()
		for range reps {
			d.MatMulNT(c, w, w, n, n, n, false)
		}
		d.Download(one, c.Slice(0, 1))
		if err := d.Err(); err != nil {
			return 0, fmt.Errorf("the card's GEMM probe: %w", err)
		}
		if round >= 0 {
			best = max(best, 2*float64(n)*float64(n)*float64(n)*float64(reps)/time.Since(t0).Seconds()/1e12)
		}
	}
	return best, nil
}

// finishDevice ends the engine side's use of its device: on a GPU the card's product rate
// (deviceGEMMPeak) first, then the device closed, so that its memory goes back before the
// reference runs on the same card (at 8192 tokens of the 7B shape the two do not fit
// together); the caller keeps the model's configuration only.
func finishDevice(dev engine.Device, o benchOptions, side *benchSide, logf func(string, ...any)) error {
	if gpuDevice(o.device) {
		tf, err := deviceGEMMPeak(dev, deviceGEMMSize)
		if err != nil {
			return err
		}
		side.DeviceGEMMTFlops = tf
		logf("the card's bfloat16 product (%d³): %.1f TFLOP/s", deviceGEMMSize, tf)
	}
	if c, ok := dev.(interface{ Close() }); ok {
		c.Close()
	}
	return nil
}
