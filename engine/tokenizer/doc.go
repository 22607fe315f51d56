// Package tokenizer implements HuggingFace's BPE tokenizers (tokenizer.json) as the
// supported model families ship them: byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM) and
// SentencePiece-style BPE with byte fallback (Llama 2, Mistral).
//
// It loads added and special tokens (lstrip/rstrip); the normalizers NFC, NFD, NFKC,
// NFKD, Lowercase, Strip, Prepend, Replace and Sequence; the pre-tokenizers ByteLevel
// (add_prefix_space, use_regex), Split (every behavior, invert), Digits, Punctuation,
// Whitespace, WhitespaceSplit, Metaspace (prepend_scheme, split) and Sequence, through a
// regex engine with lookahead; the BPE model (merges by rank, ignore_merges,
// byte_fallback, unk_token, fuse_unk); and the decoders ByteLevel, ByteFallback, Fuse,
// Strip, Replace, Metaspace and Sequence. Anything else is refused by name.
//
// One deliberate difference from HF: decoding keeps bytes that do not form UTF-8 as they
// are (HF writes U+FFFD), so that text streamed token by token assembles a character
// split across tokens. Stream decodes a sequence token by token as Decode decodes all of
// it (a lone SentencePiece token would lose its space). reference_test.go checks encoding and decoding against HuggingFace
// tokenizers on testdata/corpus.json (fixtures from tools/tokref).
package tokenizer
