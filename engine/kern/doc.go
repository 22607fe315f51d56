// Package kern holds the engine's numeric kernels: matrix products in the three layouts a
// transformer's forward and backward passes need, and a few vector ops. Every function is
// generic over float32 and float64: float64 serves the finite-difference gradient checks,
// float32 is the fast path (assembly where it pays, with a pure-Go fallback). Frozen
// holds a frozen weight matrix in a narrower format (bf16, GGUF Q8_0 or Q4_1), with
// products that widen it in registers (frozen.go, frozenmm.go), or, for q8_0 and q4_1
// products of several rows on AVX512-VNNI, quantise the activations to 8 bits and
// multiply in integers (frozenq8.go).
//
// All matrices are dense row-major slices. Shapes are given explicitly; callers guarantee
// the slices are long enough.
package kern
