"""The cookbook's qwen3_instruct renderer, given the served preset's tokenizer, produces the
same tokens as the model's own chat template (ChatML) rendered and tokenized by the server
(`tuft model render`, engine/chat + engine/tokenizer). This is why the suite may pass
renderer_name=qwen3_instruct for the preset models."""

import json
import os
import subprocess

import pytest
from tinker_cookbook import renderers
from tinker_cookbook.tokenizer_utils import get_tokenizer

from conftest import MODEL, RENDERER

CONVERSATIONS = [
    [{"role": "user", "content": "What is 4 + 5?"}, {"role": "assistant", "content": "9"}],
    [{"role": "system", "content": "Answer with a number."},
     {"role": "user", "content": "What is 17 + 25?"}, {"role": "assistant", "content": "42"}],
    [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello. How can I help?"},
     {"role": "user", "content": "Spell 'strawberry', then count the r's.\nBe brief."},
     {"role": "assistant", "content": "s-t-r-a-w-b-e-r-r-y: 3"}],
    [{"role": "user", "content": "Unicode: café, 東京, emoji 🙂 and  two  spaces"},
     {"role": "assistant", "content": "ok\n\n  indented\ttab"}],
]


def server_render(msgs, generation_prompt):
    args = [os.environ["TUFT_BIN"], "model", "render", "--model", MODEL]
    if generation_prompt:
        args.append("--generation-prompt")
    p = subprocess.run(args, input=json.dumps(msgs), capture_output=True, text=True, check=True)
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def renderer():
    return renderers.get_renderer(RENDERER, get_tokenizer(MODEL))


@pytest.mark.parametrize("i", range(len(CONVERSATIONS)))
def test_generation_prompt_matches_chat_template(renderer, i, fig):
    """qwen3_instruct generation prompt == the preset's ChatML template + tokenizer (server side), token for token."""
    prompt = CONVERSATIONS[i][:-1]
    got = renderer.build_generation_prompt(prompt).to_ints()
    want = server_render(prompt, generation_prompt=True)
    fig(tokens=len(got))
    assert got == want["tokens"], f"\ncookbook: {got}\nserver:   {want['tokens']}\ntext: {want['text']!r}"


@pytest.mark.parametrize("i", range(len(CONVERSATIONS)))
def test_supervised_example_matches_chat_template(renderer, i, fig):
    """qwen3_instruct training example == the template's rendering of the whole conversation, up to the final <|im_end|>."""
    msgs = CONVERSATIONS[i]
    model_input, weights = renderer.build_supervised_example(msgs)
    got = model_input.to_ints()
    want = server_render(msgs, generation_prompt=False)
    # The template closes every turn with "<|im_end|>\n"; the renderer's example ends at the
    # stop token, since nothing is trained after it.
    assert want["text"].endswith("<|im_end|>\n")
    newline = server_render([{"role": "user", "content": ""}], False)["tokens"][-1]
    assert want["tokens"][-1] == newline
    fig(tokens=len(got), trained=int(sum(weights)))
    assert got == want["tokens"][:-1], f"\ncookbook: {got}\nserver:   {want['tokens']}"
    # Only the last assistant turn and its stop token carry weight.
    answer = renderer.tokenizer.encode(msgs[-1]["content"] + "<|im_end|>", add_special_tokens=False)
    assert int(sum(weights)) == len(answer)


def test_stop_sequence_is_the_templates_end_of_turn(renderer):
    """The renderer stops sampling at <|im_end|>, the preset's eos_token."""
    cfg = json.loads(open(os.path.join(MODEL, "tokenizer_config.json")).read())
    end = server_render([{"role": "user", "content": "x"}], False)["tokens"][-2]
    assert renderer.get_stop_sequences() == [end]
    assert renderer.tokenizer.convert_ids_to_tokens(end) == cfg["eos_token"] == "<|im_end|>"
