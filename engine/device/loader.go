package device

// WeightLoader is implemented by devices that place a frozen weight straight from its
// stored little-endian bytes, so that loading a model builds no float32 copy of it on
// the host: the device converts through a bounded staging buffer of its own.
type WeightLoader[T Float] interface {
	// WeightFrom places n elements stored as dtype ("F32", "BF16", …) as a frozen weight,
	// like Device.Weight; ok is false (and nothing is placed) for a dtype the device does
	// not take this way. Errors surface through Device.Err.
	WeightFrom(dtype string, data []byte, n int) (t Tensor[T], ok bool)
	// EndWeights releases what WeightFrom kept between calls (its staging buffer).
	EndWeights()
}
