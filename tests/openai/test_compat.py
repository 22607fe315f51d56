"""The official `openai` and `anthropic` Python clients, unchanged, against `tuft launch`.

run.sh starts the server (tiny built-in model, tenants alice and bob) and sets TUFT_URL,
TUFT_KEY_A, TUFT_KEY_B and TUFT_MODEL. A LoRA checkpoint is trained for a few steps
through the Tinker HTTP routes first, then sampled by its tinker:// path.
"""

import json
import os
import time
import urllib.error
import urllib.request

import anthropic
import openai
import pytest

URL = os.environ["TUFT_URL"]
KEY_A = os.environ["TUFT_KEY_A"]
KEY_B = os.environ["TUFT_KEY_B"]
MODEL = os.environ["TUFT_MODEL"]


def oai(key=KEY_A):
    return openai.OpenAI(base_url=URL + "/oai/api/v1", api_key=key, max_retries=0)


def claude(key=KEY_A):
    return anthropic.Anthropic(base_url=URL + "/anthropic/api", api_key=key, max_retries=0)


def tinker(path, body, key=KEY_A):
    """One Tinker route; futures are retrieved until they resolve."""
    req = urllib.request.Request(URL + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"X-API-Key": key, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        out = json.loads(r.read())
    if "request_id" in out and path != "/api/v1/retrieve_future":
        for _ in range(600):
            try:
                return tinker("/api/v1/retrieve_future", {"request_id": out["request_id"]}, key)
            except urllib.error.HTTPError as e:
                if e.code != 408:
                    raise
        raise TimeoutError(out["request_id"])
    return out


@pytest.fixture(scope="module")
def checkpoint():
    """Trains a rank-4 LoRA adapter for a few steps and saves it for sampling."""
    se = tinker("/api/v1/create_session", {"tags": [], "sdk_version": "0.25.0"})["session_id"]
    created = tinker("/api/v1/create_model", {"session_id": se, "model_seq_id": 0, "base_model": MODEL,
                                              "lora_config": {"rank": 4, "seed": 1}})
    run = created["model_id"]
    toks = list(range(10, 42))
    datum = {"model_input": {"chunks": [{"type": "encoded_text", "tokens": toks[:-1]}]},
             "loss_fn_inputs": {"target_tokens": {"data": toks[1:], "dtype": "int64"}}}
    seq = 1
    for _ in range(4):
        tinker("/api/v1/forward_backward", {"model_id": run, "seq_id": seq,
                                            "forward_backward_input": {"data": [datum], "loss_fn": "cross_entropy"}})
        tinker("/api/v1/optim_step", {"model_id": run, "seq_id": seq + 1, "adam_params": {"learning_rate": 0.02}})
        seq += 2
    saved = tinker("/api/v1/save_weights_for_sampler", {"model_id": run, "seq_id": seq, "path": "oai-step4"})
    assert saved["path"].startswith("tinker://") and "/sampler_weights/" in saved["path"]
    return saved["path"]


def test_models_lists_base_models_and_own_checkpoints(checkpoint):
    ids = [m.id for m in oai().models.list()]
    assert MODEL in ids
    assert checkpoint in ids
    assert checkpoint not in [m.id for m in oai(KEY_B).models.list()]
    assert oai().models.retrieve(MODEL).id == MODEL
    assert oai().models.retrieve(checkpoint).id == checkpoint
    with pytest.raises(openai.NotFoundError):
        oai(KEY_B).models.retrieve(checkpoint)


def test_completion():
    r = oai().completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=8, seed=3, temperature=0.7)
    assert r.object == "text_completion" and r.model == MODEL
    assert len(r.choices) == 1 and r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0 and 0 < r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    again = oai().completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=8, seed=3, temperature=0.7)
    assert again.choices[0].text == r.choices[0].text  # the seed decides


def test_completion_n_with_logprobs_and_echo():
    r = oai().completions.create(model=MODEL, prompt="Hello, world", max_tokens=5, n=3, logprobs=2, seed=1)
    assert [c.index for c in r.choices] == [0, 1, 2]
    for c in r.choices:
        lp = c.logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) > 0
        assert all(v <= 0 for v in lp.token_logprobs)
        assert all(1 <= len(t) <= 2 for t in lp.top_logprobs)
        assert "".join(lp.tokens) == c.text or c.finish_reason == "stop"
    e = oai().completions.create(model=MODEL, prompt="Hello, world", max_tokens=3, echo=True, logprobs=1, seed=1)
    c = e.choices[0]
    assert c.text.startswith("Hello, world")
    assert c.logprobs.token_logprobs[0] is None and c.logprobs.text_offset[0] == 0


def test_stop_string_ends_the_text_without_it():
    base = oai().completions.create(model=MODEL, prompt="Once upon a time", max_tokens=30, seed=5, temperature=0)
    text = base.choices[0].text
    stop = next((text[i:i + 2] for i in range(3, len(text) - 2) if text[i:i + 2].isprintable() and text[i:i + 2].strip()), None)
    if stop is None:
        pytest.skip("the tiny model produced no usable stop string")
    r = oai().completions.create(model=MODEL, prompt="Once upon a time", max_tokens=30, seed=5, temperature=0, stop=[stop])
    assert r.choices[0].text == text[:text.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_chat():
    r = oai().chat.completions.create(model=MODEL, messages=[{"role": "system", "content": "Be brief."},
                                                             {"role": "user", "content": "What is the capital of France?"}],
                                      max_completion_tokens=12, seed=2)
    assert r.object == "chat.completion"
    m = r.choices[0].message
    assert m.role == "assistant" and isinstance(m.content, str)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 12


def test_chat_n_with_logprobs_and_top_logprobs():
    r = oai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], n=2, max_tokens=6,
                                      logprobs=True, top_logprobs=3, seed=4)
    assert len(r.choices) == 2
    for c in r.choices:
        content = c.logprobs.content
        assert content, "logprobs.content must list the tokens"
        for t in content:
            assert t.logprob <= 0 and len(t.top_logprobs) == 3
            assert t.top_logprobs[0].logprob >= t.top_logprobs[-1].logprob
            assert bytes(t.bytes).decode("utf-8", "replace") == t.token or "\ufffd" in t.token


def test_chat_stream_arrives_token_by_token():
    """The first chunk arrives while generation goes on, and the streamed text equals the
    whole response for the same seed."""
    msgs = [{"role": "user", "content": "Tell me a long story."}]
    start = time.perf_counter()
    stream = oai().chat.completions.create(model=MODEL, messages=msgs, max_tokens=400, seed=7, stream=True,
                                           stream_options={"include_usage": True})
    arrivals, text, usage, finish = [], [], None, None
    for chunk in stream:
        arrivals.append(time.perf_counter() - start)
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                text.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
    assert usage is not None and usage.completion_tokens > 0
    assert finish in ("stop", "length")
    # Token by token: many chunks, spread over the generation, not one burst at the end.
    assert len(arrivals) >= min(usage.completion_tokens, 20)
    first, last = arrivals[0], arrivals[-1]
    assert first < last
    print(f"\nstream: {usage.completion_tokens} tokens, first chunk after {first * 1000:.1f} ms, "
          f"last after {last * 1000:.1f} ms ({len(arrivals)} chunks)")
    whole = oai().chat.completions.create(model=MODEL, messages=msgs, max_tokens=400, seed=7)
    assert "".join(text) == whole.choices[0].message.content


def test_completion_stream():
    chunks = list(oai().completions.create(model=MODEL, prompt="One, two,", max_tokens=10, seed=9, stream=True))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    whole = oai().completions.create(model=MODEL, prompt="One, two,", max_tokens=10, seed=9)
    assert text == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_trained_checkpoint_by_tinker_path(checkpoint):
    kw = dict(prompt=[list(range(10, 30))], max_tokens=4, temperature=0, logprobs=0)
    base = oai().completions.create(model=MODEL, **kw)
    tuned = oai().completions.create(model=checkpoint, **kw)
    assert tuned.model == checkpoint
    # The adapter was trained on this sequence: it predicts it better than the base model.
    assert tuned.choices[0].logprobs.token_logprobs != base.choices[0].logprobs.token_logprobs
    both = oai().completions.create(model=MODEL + ";" + checkpoint, **kw)
    assert both.choices[0].text == tuned.choices[0].text
    # Equal to float32 rounding, not bit for bit: the second request's prompt comes partly
    # from the prefix cache, and batched rows sum in another order (docs/scheduling.md).
    assert both.choices[0].logprobs.token_logprobs == pytest.approx(tuned.choices[0].logprobs.token_logprobs, abs=1e-5)
    chat = oai().chat.completions.create(model=checkpoint, messages=[{"role": "user", "content": "Hi"}], max_tokens=5)
    assert chat.choices[0].message.role == "assistant"


def test_unknown_model_is_404():
    with pytest.raises(openai.NotFoundError) as e:
        oai().chat.completions.create(model="no/such-model", messages=[{"role": "user", "content": "Hi"}])
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        oai().completions.create(model="tinker://nope:train:0/sampler_weights/x", prompt="Hi")


def test_other_tenants_checkpoint_is_404_like_a_missing_one(checkpoint):
    with pytest.raises(openai.NotFoundError):
        oai(KEY_B).chat.completions.create(model=checkpoint, messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(anthropic.NotFoundError):
        claude(KEY_B).messages.create(model=checkpoint, max_tokens=4, messages=[{"role": "user", "content": "Hi"}])


def test_unsupported_parameters_are_named():
    with pytest.raises(openai.BadRequestError) as e:
        oai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                      tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    assert e.value.body["param"] == "tools"
    with pytest.raises(openai.BadRequestError) as e:
        oai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}])
    assert "image_url" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        oai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                      extra_body={"no_such_option": 1})
    assert e.value.body["param"] == "no_such_option"


def test_bad_key_is_401():
    with pytest.raises(openai.AuthenticationError):
        oai("tml-not-a-key").models.list()
    with pytest.raises(anthropic.AuthenticationError):
        claude("tml-not-a-key").messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "Hi"}])


def test_anthropic_message():
    # Recent anthropic clients dropped temperature/top_p/top_k as arguments; extra_body sends them.
    m = claude().messages.create(model=MODEL, max_tokens=10, system="Be brief.", extra_body={"temperature": 0.5, "top_k": 20},
                                 messages=[{"role": "user", "content": "Hello"}])
    assert m.type == "message" and m.role == "assistant" and m.model == MODEL
    assert m.content[0].type == "text"
    assert m.stop_reason in ("end_turn", "max_tokens", "stop_sequence")
    assert m.usage.input_tokens > 0 and 0 < m.usage.output_tokens <= 10


def test_anthropic_stream():
    kw = dict(model=MODEL, max_tokens=30, messages=[{"role": "user", "content": "Count to ten."}], extra_body={"temperature": 0})
    with claude().messages.stream(**kw) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert final.content[0].text == text
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens > 0
    whole = claude().messages.create(**kw)
    assert whole.content[0].text == text
    kinds = [e.type for e in claude().messages.create(stream=True, **kw)]
    assert kinds[:3] == ["message_start", "content_block_start", "content_block_delta"] or kinds[0] == "message_start"
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]


def test_anthropic_count_tokens():
    msgs = [{"role": "user", "content": "Hello there"}]
    n = claude().messages.count_tokens(model=MODEL, messages=msgs, system="Be brief.")
    m = claude().messages.create(model=MODEL, max_tokens=1, messages=msgs, system="Be brief.")
    assert n.input_tokens == m.usage.input_tokens > 0


def test_anthropic_checkpoint_and_errors(checkpoint):
    m = claude().messages.create(model=checkpoint, max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
    assert m.model == checkpoint
    with pytest.raises(anthropic.NotFoundError):
        claude().messages.create(model="no/such-model", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(anthropic.BadRequestError) as e:
        claude().messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "Hi"}],
                                 tools=[{"name": "f", "input_schema": {"type": "object"}}])
    assert "tools" in e.value.message
