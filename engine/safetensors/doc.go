// Package safetensors reads and writes the safetensors format: an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {…}},
// then the raw little-endian tensor bytes. Every decoding error names the file and the
// problem.
package safetensors
