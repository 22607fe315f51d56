package engine

// LoraParamCount is the number of parameters of an adapter with config cfg on a model
// of architecture c: what one copy of its weights (or of its gradients, or of one
// optimizer moment) holds in float32. The control plane bounds a tenant's adapters and
// saves by it before anything is allocated.
func LoraParamCount(c Config, cfg LoraConfig) int64 {
	if cfg.Rank < 1 {
		return 0
	}
	r := int64(cfg.Rank)
	var n int64
	t := targets(cfg)
	for p := Proj(0); p < NumLayerProj; p++ {
		if t[p] {
			in, out := projDims(c, p)
			n += r * int64(in+out)
		}
	}
	n *= int64(c.Layers)
	if cfg.TrainUnembed {
		n += r * int64(c.Hidden+c.VocabSize)
	}
	return n
}
