// Package engine trains LoRA adapters on, and samples from, decoder-only transformers of
// the Llama and Qwen2 families. It is a library: no globals, no HTTP, no telemetry
// exporters, no tenants or futures. Calls take a context.Context and return errors;
// *InputError marks a fault of the request (a 400 at the API). Sample reports its phases
// through SampleHooks; backend's scheduler, which drives decode steps itself, opens its
// own spans.
//
// The files read in the order of llama2.c:
//
//   - config.go: Config and its HuggingFace config.json parser.
//   - weights.go: the frozen weights, their shapes, Load of a model directory, and their
//     copy on the compute device.
//   - model.go: Model (config + weights + tokenizer + device) and the options that pick
//     the device.
//   - transformer.go: the transformer, written once: RoPE, the LoRA-aware linear layer,
//     forward (training over packed sequences, or sampling from KV caches) and backward.
//   - lora.go: adapters (LoraWeights, Adapter), their initialisation, and their copy on
//     the device.
//   - train.go: ForwardBackward and the multi-LoRA batch that packs many adapters'
//     datums into one pass; trainjob.go: the same run a few datums at a time
//     (TrainJob, TrainStep), the training unit of a scheduler.
//   - loss.go: the Tinker losses and their gradients with respect to target logprobs.
//   - optim.go: AdamW.
//   - kvcache.go: the block-allocated KV cache (KVPool, KVCache with copy-on-write forks).
//   - sampler.go: DecodeStep (one iteration over many sequences, the scheduler's unit)
//     and Sample, the decode loop built on it; generation.go: Generation, every rule of
//     generating (stop tokens, seed streams, draws, stop reason, prompt logprobs and
//     top-k) that Sample and a scheduler both drive; promptout.go: the prompt-position
//     outputs; stopmatch.go: stop strings matched on new text only.
//   - validate.go: the checks a server runs before queueing a request.
//   - peft.go, preset.go: PEFT adapter files and the built-in preset models.
//   - types.go: the types exchanged with callers.
//
// All arithmetic runs on a device.Device (engine/device): the CPU (engine/kern kernels)
// or, in builds with the cuda tag, an NVIDIA GPU (engine/cuda).
package engine
