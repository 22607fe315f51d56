package device

// Grapher is a device that can run the operations of a step as one recorded graph
// (CUDA graphs on the GPU): the engine's decode steps use it when the device has it.
// Graph runs f's operations as the graph recorded for key (capturing it the first
// time); f gets the device to run them on and must not keep it. It reports false, with
// nothing of f run, when the device cannot use a graph for them (graphs off, an
// operation a graph cannot hold, or operations that differ from the capture's, which
// would replay stale arguments); the caller then runs f itself, eagerly.
type Grapher[T Float] interface {
	Graph(key string, f func(Device[T])) bool
	// GraphsEnabled reports whether Graph may run anything (the caller need not build
	// keys otherwise).
	GraphsEnabled() bool
}
