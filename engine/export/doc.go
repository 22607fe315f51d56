// Package export writes a trained LoRA adapter out of TuFT in the formats that other
// tools serve: a PEFT adapter (peft, vLLM), a merged model as Hugging Face safetensors
// (transformers), a merged model as GGUF and a GGUF LoRA adapter (llama.cpp), and an
// Ollama Modelfile beside the GGUF. docs/export.md describes the formats, their precision
// and the module rules (Check) that decide what each format can carry.
//
// It sits above engine: it reads a base Model's frozen weights and an Adapter, and never
// changes either (a merge computes each merged tensor into a fresh slice).
package export
