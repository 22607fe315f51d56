// Package engine is the pure Go model code: the Llama and Qwen2 transformer on the
// numeric kernels of engine/kern, multi-LoRA adapters with AdamW, the Tinker losses,
// the sampler, PEFT-compatible adapter files, HuggingFace config and safetensors loading
// (engine/safetensors), tokenizers (engine/tokenizer), chat templates (engine/chat) and
// the built-in presets.
//
// It is a library: no globals but read-only tables, no HTTP, no tenants, no futures, no
// telemetry. Calls take a context.Context and return errors; *InputError marks a fault
// of the request (a 400 at the API). Tracing reaches into sampling only through the
// SampleHooks callbacks, which backend turns into spans.
package engine
