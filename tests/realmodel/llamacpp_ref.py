#!/usr/bin/env python3
"""llama.cpp (llama-cpp-python) as the reference for the real-model suite, on the same
GGUF file the engine loads.

    llamacpp_ref.py GGUF CORPUS OUT

writes OUT = {
  "llama_cpp_version",
  "tokens": [{"text", "ids"}]      llama.cpp's tokenizer on every corpus string
                                    (vocab_only; special tokens parsed, no BOS added),
  "logprob_text", "logprob_ids",   a ~60-token text and its tokens,
  "logprobs": [...]                log p(token i | tokens < i) for i >= 1, from
                                    logits_all=True (float64 log-softmax of llama.cpp's logits),
  "argmax": [...]                  llama.cpp's most likely next token at each position
}
"""
import json
import sys

import numpy as np
import llama_cpp

LOGPROB_TEXT = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
                "It is named after the engineer Gustave Eiffel, whose company designed and built the tower "
                "from 1887 to 1889.")


def main(path, corpus_path, out):
    with open(corpus_path, encoding="utf-8") as f:
        corpus = json.load(f)
    vocab = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    tokens = [{"text": s, "ids": vocab.tokenize(s.encode("utf-8"), add_bos=False, special=True)} for s in corpus]
    del vocab
    llm = llama_cpp.Llama(model_path=path, logits_all=True, n_ctx=256, n_threads=2, n_batch=256, verbose=False)
    ids = llm.tokenize(LOGPROB_TEXT.encode("utf-8"), add_bos=False, special=True)
    llm.reset()
    llm.eval(ids)
    logits = np.asarray(llm.scores[:len(ids)], dtype=np.float64)
    m = logits.max(axis=1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
    lps = [float(logp[i - 1, ids[i]]) for i in range(1, len(ids))]
    with open(out, "w") as f:
        json.dump({"llama_cpp_version": llama_cpp.__version__, "tokens": tokens, "logprob_text": LOGPROB_TEXT,
                   "logprob_ids": ids, "logprobs": lps, "argmax": [int(a) for a in logits.argmax(axis=1)]}, f)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
