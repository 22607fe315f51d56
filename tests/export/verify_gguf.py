"""Loads TuFT's GGUF exports with llama.cpp (llama-cpp-python) and compares its answers
with our engine's reference (prep ref): the prompt's tokenisation by the GGUF's own
tokenizer metadata, per-token log-probabilities of a probe text within a stated tolerance,
and the greedy continuation of the prompt token for token.

  verify_gguf.py MODEL_GGUF LORA_GGUF|- REF_JSON TOL PROMPT_TEXT
"""
import json
import sys

import numpy as np
from llama_cpp import Llama


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main():
    model, lora, ref_path, tol, prompt_text = sys.argv[1:6]
    ref = json.load(open(ref_path))
    kw = {}
    if lora != "-":
        kw["lora_path"] = lora
    llm = Llama(model_path=model, logits_all=True, n_ctx=256, n_threads=2, n_batch=256, verbose=False, seed=0, **kw)
    name = model.rsplit("/", 1)[-1] + ("" if lora == "-" else " + " + lora.rsplit("/", 1)[-1])
    ok = True
    toks = llm.tokenize(prompt_text.encode(), add_bos=False, special=False)
    if toks != ref["prompt"]:
        print(f"{name}: the GGUF's tokenizer gives {toks} for {prompt_text!r}, the engine {ref['prompt']}")
        ok = False
    llm.reset()
    llm.eval(ref["probe"])
    lp = log_softmax(np.array(llm.scores[: len(ref["probe"])]))
    got = lp[np.arange(len(ref["targets"])), ref["targets"]]
    diff = float(np.max(np.abs(got - np.array(ref["logprobs"]))))
    llm.reset()
    llm.eval(ref["prompt"])
    greedy = []
    for _ in range(len(ref["greedy"])):
        t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        greedy.append(t)
        llm.eval([t])
    print(f"{name}: max |logprob - engine| = {diff:.2e} (tolerance {float(tol):g}) over {len(got)} tokens; "
          f"greedy {'same' if greedy == ref['greedy'] else 'DIFFERENT'} ({len(greedy)} tokens)")
    if greedy != ref["greedy"]:
        print(f"  engine:    {ref['greedy']}\n  llama.cpp: {greedy}")
        ok = False
    sys.exit(0 if ok and diff <= float(tol) else 1)


if __name__ == "__main__":
    main()
