"""Loads TuFT's PEFT and merged Hugging Face exports with their real consumers (peft and
transformers, on Debian's torch) and compares their answers with our engine's reference
(prep ref): per-token log-probabilities of a probe text within a stated tolerance, and the
greedy continuation of a prompt token for token.

  verify_hf.py peft BASE_DIR PEFT_DIR REF_JSON TOL
  verify_hf.py hf   HF_DIR REF_JSON TOL [PROMPT_TEXT]

With PROMPT_TEXT, the export's own tokenizer (AutoTokenizer on HF_DIR) must tokenise it as
our engine did.
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def answers(model, ref):
    model.eval()
    with torch.no_grad():
        ids = torch.tensor([ref["probe"]])
        lp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
        got = lp[torch.arange(len(ref["targets"])), torch.tensor(ref["targets"])].tolist()
        seq = list(ref["prompt"])
        for _ in range(len(ref["greedy"])):  # argmax decoding, EOS ignored as the engine did
            logits = model(torch.tensor([seq])).logits[0, -1]
            seq.append(int(torch.argmax(logits)))
    return got, seq[len(ref["prompt"]):]


def check(name, model, ref, tol):
    got, greedy = answers(model, ref)
    diff = max(abs(a - b) for a, b in zip(got, ref["logprobs"]))
    print(f"{name}: max |logprob - engine| = {diff:.2e} (tolerance {tol:g}) over {len(got)} tokens; "
          f"greedy {'same' if greedy == ref['greedy'] else 'DIFFERENT'} ({len(greedy)} tokens)")
    ok = diff <= tol and greedy == ref["greedy"]
    if greedy != ref["greedy"]:
        print(f"  engine: {ref['greedy']}\n  {name}: {greedy}")
    return ok


def main():
    mode = sys.argv[1]
    torch.manual_seed(0)
    if mode == "peft":
        from peft import PeftModel
        base_dir, peft_dir, ref_path, tol = sys.argv[2:6]
        base = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
        model = PeftModel.from_pretrained(base, peft_dir)
        name = "peft"
    else:
        hf_dir, ref_path, tol = sys.argv[2:5]
        model = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
        name = "transformers"
    ref = json.load(open(ref_path))
    ok = check(name, model, ref, float(tol))
    if mode == "hf" and len(sys.argv) > 5:
        from transformers import AutoTokenizer
        toks = AutoTokenizer.from_pretrained(hf_dir)(sys.argv[5], add_special_tokens=False)["input_ids"]
        print(f"{name}: the export's tokenizer gives {'the same tokens' if toks == ref['prompt'] else toks} for {sys.argv[5]!r}")
        ok = ok and toks == ref["prompt"]
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
