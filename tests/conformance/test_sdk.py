"""Conformance suite: the official Tinker SDK against `tuft launch`, run once per release of
versions.txt (run.sh prints the resulting matrix).

Each test is one scenario of the SDK's public, high-level API; its docstring's first line
names the feature in the matrix. A scenario that needs an API some releases lack (or that
a release removed) is skipped there with `needs(...)`. Nothing here patches the SDK.
Environment (set by run.sh): TINKER_BASE_URL, TUFT_KEY_A and TUFT_KEY_B (two tenants),
TUFT_MODEL, TUFT_MODEL_DIR (the model's files).
"""

import io
import math
import os
import tarfile
import time
import urllib.request

import numpy as np
import pytest
import tinker
from tinker import types

BASE_URL = os.environ["TINKER_BASE_URL"]
KEY_A = os.environ["TUFT_KEY_A"]
KEY_B = os.environ["TUFT_KEY_B"]
MODEL = os.environ.get("TUFT_MODEL", "tuft/tiny")
VOCAB = 512  # the tiny preset's vocabulary
ADAM = types.AdamParams(learning_rate=5e-3, beta1=0.9, beta2=0.95, eps=1e-8)


def _version(v):
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())


SDK = _version(tinker.__version__)


def needs(since=None, before=None, why=""):
    """Skips a scenario on SDK releases outside [since, before)."""
    lo = since is None or SDK >= _version(since)
    hi = before is None or SDK < _version(before)
    if since and before:
        span = f"SDK {since} to before {before}"
    elif since:
        span = f"SDK >= {since}"
    else:
        span = f"SDK < {before}"
    return pytest.mark.skipif(not (lo and hi), reason=f"{why} ({span})" if why else span)


def client(key=KEY_A):
    return tinker.ServiceClient(base_url=BASE_URL, api_key=key)


@pytest.fixture(scope="module")
def sc():
    return client()


def sft_batch(n=4, length=24, seed=0):
    """A learnable batch: each sequence counts upwards, so next-token prediction is easy."""
    rng = np.random.default_rng(seed)
    data = []
    for _ in range(n):
        start = int(rng.integers(10, 200))
        seq = [(start + i) % 300 + 10 for i in range(length + 1)]
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(seq[:-1]),
                loss_fn_inputs={"target_tokens": seq[1:], "weights": [1.0] * length},
            )
        )
    return data


def loss_of(out):
    return out.metrics["loss:sum"]


def test_sft_loss_goes_down_then_save_and_sample(sc):
    """SFT: loss goes down, save_state, save_weights_for_sampler, sample (seeded)"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=8, seed=1)
    data = sft_batch()
    losses = []
    for _ in range(6):
        fb = tc.forward_backward(data, "cross_entropy")
        opt = tc.optim_step(ADAM)
        out = fb.result()
        opt.result()
        losses.append(loss_of(out))
        assert len(out.loss_fn_outputs) == len(data)
        lp = out.loss_fn_outputs[0]["logprobs"].tolist()
        assert len(lp) == 24 and all(x <= 0 for x in lp)
    print("sft losses", losses)
    assert losses[-1] < losses[0] * 0.9, losses

    state = tc.save_state("sft-state").result()
    assert state.path.startswith("tinker://") and state.path.endswith("/weights/sft-state")
    sampler_path = tc.save_weights_for_sampler("sft-final").result().path
    assert sampler_path.endswith("/sampler_weights/sft-final")

    scl = sc.create_sampling_client(model_path=sampler_path)
    prompt = types.ModelInput.from_ints([20, 21, 22, 23])
    res = scl.sample(prompt, num_samples=4, sampling_params=types.SamplingParams(max_tokens=8, temperature=1.0, seed=7)).result()
    assert len(res.sequences) == 4
    for s in res.sequences:
        assert 1 <= len(s.tokens) <= 8
        assert s.logprobs is not None and len(s.logprobs) == len(s.tokens)
        assert all(lp <= 0 and math.isfinite(lp) for lp in s.logprobs)
        assert s.stop_reason in ("stop", "length")
    again = scl.sample(prompt, num_samples=4, sampling_params=types.SamplingParams(max_tokens=8, temperature=1.0, seed=7)).result()
    assert [s.tokens for s in again.sequences] == [s.tokens for s in res.sequences], "same seed must give the same samples"


def rl_datums(prompt, seqs, advantages):
    ob = len(prompt) - 1
    out = []
    for s, adv in zip(seqs, advantages):
        toks = list(s.tokens)
        model_input = prompt + toks[:-1]
        n = len(model_input)
        out.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(model_input),
                loss_fn_inputs={
                    "target_tokens": [0] * ob + toks,
                    "logprobs": [0.0] * ob + list(s.logprobs),
                    "advantages": [0.0] * ob + [adv] * (n - ob),
                },
            )
        )
    return out


def test_rl_losses(sc):
    """RL losses: importance_sampling, ppo, cispo, dro on sampled data"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=8, seed=2)
    prompt = [30, 31, 32, 33, 34]
    for loss_fn, cfg in [
        ("importance_sampling", None),
        ("ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}),
        ("cispo", None),
        ("dro", {"beta": 0.05}),
    ]:
        scl = tc.save_weights_and_get_sampling_client()
        res = scl.sample(types.ModelInput.from_ints(prompt), num_samples=4,
                         sampling_params=types.SamplingParams(max_tokens=6, temperature=1.0, seed=3)).result()
        rewards = [float(sum(1 for t in s.tokens if t % 2 == 0)) for s in res.sequences]
        mean = sum(rewards) / len(rewards)
        adv = [r - mean for r in rewards]
        if all(a == 0 for a in adv):
            adv = [1.0, -1.0, 0.5, -0.5]
        data = rl_datums(prompt, res.sequences, adv)
        fb = tc.forward_backward(data, loss_fn, cfg)
        opt = tc.optim_step(types.AdamParams(learning_rate=1e-3))
        out = fb.result()
        opt.result()
        assert math.isfinite(loss_of(out)), (loss_fn, out.metrics)
        assert len(out.loss_fn_outputs) == len(data)
        print(loss_fn, out.metrics)


def test_resume_with_optimizer_continues_exactly(sc):
    """Resume with optimizer continues exactly (create-via-load from 0.38)"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=8, seed=3)
    data = sft_batch(seed=5)
    for _ in range(2):
        tc.forward_backward(data, "cross_entropy").result()
        tc.optim_step(ADAM).result()
    path = tc.save_state("resume-point").result().path

    resumed = sc.create_training_client_from_state_with_optimizer(path)
    next_data = sft_batch(seed=6)
    a = []
    b = []
    for client_, out in ((tc, a), (resumed, b)):
        for _ in range(2):
            out.append(loss_of(client_.forward_backward(next_data, "cross_entropy").result()))
            client_.optim_step(ADAM).result()
    print("original", a, "resumed", b)
    assert a == b, "a run resumed with its optimizer must continue exactly like the original"


def test_compute_logprobs(sc):
    """compute_logprobs"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    scl = tc.save_weights_and_get_sampling_client()
    lps = scl.compute_logprobs(types.ModelInput.from_ints([40, 41, 42, 43, 44])).result()
    assert len(lps) == 5 and lps[0] is None
    assert all(x is not None and x <= 0 for x in lps[1:])


def test_large_batch_is_chunked_and_pipelined(sc):
    """Chunked (1100 datums) and pipelined forward_backward"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    big = [
        types.Datum(model_input=types.ModelInput.from_ints([i % 300 + 10, i % 300 + 11]),
                    loss_fn_inputs={"target_tokens": [i % 300 + 11, i % 300 + 12], "weights": [1.0, 1.0]})
        for i in range(1100)
    ]
    # Pipelined: the second step is submitted before the first result is read.
    f1 = tc.forward_backward(big, "cross_entropy")
    o1 = tc.optim_step(ADAM)
    f2 = tc.forward_backward(sft_batch(), "cross_entropy")
    o2 = tc.optim_step(ADAM)
    out = f1.result()
    assert len(out.loss_fn_outputs) == 1100
    assert math.isfinite(loss_of(out))
    o1.result()
    assert math.isfinite(loss_of(f2.result()))
    o2.result()


def test_rest_client(sc):
    """REST: runs, checkpoints, publish, TTL, archive (to 0.35), delete"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    tc.forward_backward(sft_batch(n=1), "cross_entropy").result()
    tc.optim_step(ADAM).result()
    state = tc.save_state("rest-a").result().path
    samp = tc.save_weights_for_sampler("rest-b").result().path
    run_id = state.split("/")[2]
    rest = sc.create_rest_client()

    runs = rest.list_training_runs().result()
    assert run_id in [r.training_run_id for r in runs.training_runs]
    run = rest.get_training_run(run_id).result()
    assert run.base_model == MODEL and run.is_lora and run.lora_rank == 4

    ckpts = rest.list_checkpoints(run_id).result().checkpoints
    ids = {c.checkpoint_id for c in ckpts}
    assert {"weights/rest-a", "sampler_weights/rest-b"} <= ids, ids
    assert any(c.tinker_path == samp for c in rest.list_user_checkpoints().result().checkpoints)

    rest.publish_checkpoint_from_tinker_path(samp).result()
    assert next(c for c in rest.list_checkpoints(run_id).result().checkpoints if c.tinker_path == samp).public
    rest.unpublish_checkpoint_from_tinker_path(samp).result()
    assert not next(c for c in rest.list_checkpoints(run_id).result().checkpoints if c.tinker_path == samp).public

    rest.set_checkpoint_ttl_from_tinker_path(samp, 3600).result()
    c = next(c for c in rest.list_checkpoints(run_id).result().checkpoints if c.tinker_path == samp)
    assert c.expires_at is not None

    if SDK < _version("0.36.0"):  # the SDK removed the archive API in 0.36.0
        url = rest.get_checkpoint_archive_url_from_tinker_path(samp).result().url
        with urllib.request.urlopen(url, timeout=30) as resp:
            blob = resp.read()
        names = tarfile.open(fileobj=io.BytesIO(blob)).getnames()
        assert any(n.endswith("adapter_config.json") for n in names), names
        assert any(n.endswith("adapter_model.safetensors") for n in names), names

    rest.delete_checkpoint_from_tinker_path(samp).result()
    assert samp not in [c.tinker_path for c in rest.list_checkpoints(run_id).result().checkpoints]


def raises_promptly(fn, *needles, limit=30.0):
    t0 = time.time()
    with pytest.raises(Exception) as ei:
        fn()
    elapsed = time.time() - t0
    msg = str(ei.value)
    assert elapsed < limit, f"took {elapsed:.1f}s to fail: {msg}"
    for n in needles:
        assert n.lower() in msg.lower(), f"{n!r} not in error: {msg}"
    return msg


@needs(since="0.23.2", why="earlier ServiceClients contact the server in the constructor")
def test_wrong_api_key_fails_promptly():
    """A wrong API key fails promptly with a message"""
    bad = client("tml-not-a-real-key")
    raises_promptly(lambda: bad.create_lora_training_client(base_model=MODEL, rank=4), "api key")


def test_other_tenants_run_is_not_found(sc):
    """Another tenant's run is not found"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    run_id = tc.save_state("owned").result().path.split("/")[2]
    other = client(KEY_B).create_rest_client()
    raises_promptly(lambda: other.get_training_run(run_id).result(), "not found")


def test_unknown_loss_function_fails_promptly(sc):
    """Unknown loss function fails promptly"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    raises_promptly(lambda: tc.forward_backward(sft_batch(n=1), "not_a_loss").result(), "not_a_loss")


def test_over_long_prompt_fails_promptly(sc):
    """Over-long prompt fails promptly"""
    scl = sc.create_sampling_client(base_model=MODEL)
    prompt = types.ModelInput.from_ints([50] * 2000)
    raises_promptly(lambda: scl.sample(prompt, num_samples=1, sampling_params=types.SamplingParams(max_tokens=4)).result(),
                    "max_context_length")
