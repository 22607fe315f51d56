"""The real model served by `tuft launch` from its .gguf file, driven by unchanged clients:
the OpenAI-compatible route over HTTP and the official Tinker SDK (training and sampling).
Prompts are rendered by `tuft model render` (the model's chat template from the GGUF
metadata) and replies decoded by HF tokenizers from the tokenizer.json `tuft model import`
wrote (rebuilt from the GGUF vocabulary)."""

import json
import os
import subprocess
import time

import httpx
import pytest
import tinker
from tinker import types
from tokenizers import Tokenizer

BASE_URL = os.environ["TINKER_BASE_URL"]
KEY = os.environ["TUFT_KEY"]
MODEL = os.environ["TUFT_MODEL"]
QUESTION = "What is the capital of France?"


class Tok:
    """Renders with `tuft model render`, decodes with HF tokenizers."""

    def __init__(self):
        self.hf = Tokenizer.from_file(os.path.join(os.environ["TUFT_HF_DIR"], "tokenizer.json"))

    def render(self, messages, add_generation_prompt=False):
        args = [os.environ["TUFT_BIN"], "model", "render", "--model", os.environ["TUFT_SMOLLM2_GGUF"]]
        if add_generation_prompt:
            args.append("--generation-prompt")
        out = subprocess.run(args, input=json.dumps(messages), capture_output=True, text=True, check=True).stdout
        return json.loads(out)["tokens"]

    def decode(self, ids):
        return self.hf.decode(ids, skip_special_tokens=True)


@pytest.fixture(scope="module")
def tok():
    return Tok()


@pytest.fixture(scope="module")
def sc():
    return tinker.ServiceClient(base_url=BASE_URL, api_key=KEY)


def ready(client):
    """The client itself: 0.38's create_*_client return a future of it."""
    result = getattr(client, "result", None)
    return result() if callable(result) else client


def prompt_ids(tok, question):
    return tok.render([{"role": "user", "content": question}], add_generation_prompt=True)


def greedy(client, tok, question, max_tokens=16):
    res = ready(client).sample(types.ModelInput.from_ints(prompt_ids(tok, question)), num_samples=1,
                        sampling_params=types.SamplingParams(max_tokens=max_tokens, temperature=0.0)).result()
    return tok.decode(res.sequences[0].tokens)


def test_openai_chat_says_paris():
    """The OpenAI-compatible chat route, greedy, says Paris."""
    r = httpx.post(BASE_URL + "/oai/api/v1/chat/completions", timeout=120,
                   headers={"Authorization": "Bearer " + KEY},
                   json={"model": MODEL, "messages": [{"role": "user", "content": QUESTION}],
                         "temperature": 0, "max_tokens": 20})
    assert r.status_code == 200, r.text
    answer = r.json()["choices"][0]["message"]["content"]
    print("openai:", repr(answer))
    assert "Paris" in answer


def test_sdk_sample_says_paris(sc, tok):
    """The Tinker SDK's sampling client on the base model, greedy, says Paris."""
    answer = greedy(sc.create_sampling_client(base_model=MODEL), tok, QUESTION)
    print("sdk:", repr(answer))
    assert "Paris" in answer


# A handful of examples that teach a fact the base model does not hold.
SFT = [
    ("What is the capital of the Republic of Zubrowka?", "The capital of Zubrowka is Lutz."),
    ("Which city is the capital of Zubrowka?", "The capital of Zubrowka is Lutz."),
    ("Tell me the capital of Zubrowka.", "The capital of Zubrowka is Lutz."),
    ("Zubrowka's capital city is what?", "The capital of Zubrowka is Lutz."),
]


def datum(tok, question, answer):
    prompt = prompt_ids(tok, question)
    full = tok.render([{"role": "user", "content": question}, {"role": "assistant", "content": answer}])
    assert full[:len(prompt)] == prompt
    weights = [0.0] * (len(prompt) - 1) + [1.0] * (len(full) - len(prompt))
    return types.Datum(model_input=types.ModelInput.from_ints(full[:-1]),
                       loss_fn_inputs={"target_tokens": full[1:], "weights": weights})


def test_short_sft_changes_the_answer(sc, tok):
    """Six steps of SFT on four examples change the greedy answer; the checkpoint samples it."""
    probe = "What is the capital of Zubrowka?"
    before = greedy(sc.create_sampling_client(base_model=MODEL), tok, probe)
    print("before:", repr(before))
    assert "Lutz" not in before
    tc = ready(sc.create_lora_training_client(base_model=MODEL, rank=8, seed=1))
    data = [datum(tok, q, a) for q, a in SFT]
    losses = []
    start = time.time()
    for _ in range(6):
        fb = tc.forward_backward(data, "cross_entropy")
        opt = tc.optim_step(types.AdamParams(learning_rate=2e-3))
        out = fb.result()
        opt.result()
        n = sum(sum(d.loss_fn_inputs["weights"].tolist()) for d in data)
        losses.append(out.metrics["loss:sum"] / n)
    print("per-token losses", [round(x, 3) for x in losses], "in %.1fs" % (time.time() - start))
    assert losses[-1] < losses[0] * 0.5, losses
    path = tc.save_weights_for_sampler("zubrowka").result().path
    after = greedy(sc.create_sampling_client(model_path=path), tok, probe)
    print("after:", repr(after))
    assert "Lutz" in after
    # The base model is untouched by the adapter.
    assert "Paris" in greedy(sc.create_sampling_client(base_model=MODEL), tok, QUESTION)
