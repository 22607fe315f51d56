package device

// WeightLoader is implemented by devices that place a frozen weight straight from its
// stored little-endian bytes, so that loading a model builds no float32 copy of it on
// the host: the GPU converts through a bounded staging buffer of its own, the CPU row by
// row into its weight format.
type WeightLoader[T Float] interface {
	// WeightFrom places a [rows×cols] matrix stored as dtype ("F32", "BF16", …) as a
	// frozen weight, like Device.Weight; ok is false (and nothing is placed) where the
	// device does not take it this way (a dtype, or the CPU keeping float32 weights).
	// Errors surface through Device.Err.
	WeightFrom(dtype string, data []byte, rows, cols int) (t Tensor[T], ok bool)
	// EndWeights releases what WeightFrom kept between calls (its staging buffer).
	EndWeights()
}
