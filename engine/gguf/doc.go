// Package gguf reads GGUF files (the weight format of llama.cpp, versions 2 and 3): the
// header, the typed metadata (key/value pairs) and the tensor directory, and decodes a
// tensor's data to float32, dequantising the block formats F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1 and the K-quants Q4_K, Q5_K and Q6_K.
//
// The reader is written from the format's public description (ggml's gguf.md). Every
// length, count, offset and shape in a file is checked against the file's size before
// anything is allocated, so a truncated or hostile file is an error naming the key or
// tensor at fault, never a panic or a huge allocation (FuzzRead holds this).
//
// Mapping GGUF tensors and metadata onto the engine's model (names, the rotary row order
// of llama.cpp's converter, the tokenizer) is the engine's job (engine/gguf.go); this
// package knows the file format only.
package gguf
