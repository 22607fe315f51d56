// Package tokenizer implements HuggingFace's byte-level BPE (tokenizer.json): added and
// special tokens, the NFC normalizer, the ByteLevel and Split pre-tokenizers (the GPT-2,
// Qwen2 and Llama 3 patterns, through a regex engine with lookahead), merges by rank
// (and ignore_merges), and decoding back to bytes. reference_test.go checks it against
// HuggingFace tokenizers (fixtures from tools/tokref).
package tokenizer
