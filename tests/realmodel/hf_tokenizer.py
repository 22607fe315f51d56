#!/usr/bin/env python3
"""SmolLM2's tokenizer in HuggingFace `tokenizers`, built from the GGUF vocabulary with
the pipeline SmolLM2's tokenizer.json declares (pre-tokenizer Sequence[Digits
{individual_digits: true}, ByteLevel{add_prefix_space: false, use_regex: true}], ByteLevel
decoder, the control tokens as special added tokens), encodes the corpus.

    hf_tokenizer.py GGUF CORPUS OUT     writes {"tokenizers_version", "cases": [{text, ids, decoded}]}

tests/realmodel/testdata/smollm2_tokens.json is this output (the Go test compares the
engine's tokenizer with it without Python); run.sh regenerates it into the work
directory and fails on any difference from the committed file.
"""
import json
import sys

import gguf
import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers


def field(r, key):
    f = r.fields[key]
    return f.contents()


def main(path, corpus_path, out):
    r = gguf.GGUFReader(path)
    assert field(r, "tokenizer.ggml.model") == "gpt2"
    assert field(r, "tokenizer.ggml.pre") == "smollm"
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    with open(corpus_path, encoding="utf-8") as f:
        corpus = json.load(f)
    cases = []
    for s in corpus:
        ids = tok.encode(s, add_special_tokens=False).ids
        cases.append({"text": s, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"tokenizers_version": tokenizers.__version__, "cases": cases}, f, ensure_ascii=True, indent=0)
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
