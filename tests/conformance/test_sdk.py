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
    """REST: runs, session, checkpoints, publish, TTL, archive (to 0.35), delete"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    tc.forward_backward(sft_batch(n=1), "cross_entropy").result()
    tc.optim_step(ADAM).result()
    state = tc.save_state("rest-a").result().path
    samp = tc.save_weights_for_sampler("rest-b").result().path
    run_id = state.split("/")[2]
    rest = sc.create_rest_client()

    runs = rest.list_training_runs().result()
    assert run_id in [r.training_run_id for r in runs.training_runs]
    assert run_id in rest.get_session(run_id.split(":train:")[0]).result().training_run_ids
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


# ---- Scenarios of the SDK releases after 0.25 (each guarded by the release that added
# ---- the API it uses; the server behaviour they check is the same for every release).

import json
import urllib.error


def raw(method, path, body=None, key=KEY_A):
    """A plain HTTP call to the server, for what the SDK does not expose (status codes)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE_URL + path, data=data, method=method,
                                 headers={"X-API-Key": key, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def session_of(tc):
    return tc.model_id.split(":train:")[0]


def eos_ids():
    ids = set()
    for name in ("config.json", "generation_config.json"):
        try:
            with open(os.path.join(os.environ["TUFT_MODEL_DIR"], name)) as f:
                v = json.load(f).get("eos_token_id")
        except (KeyError, OSError):
            continue
        ids.update(v if isinstance(v, list) else [v] if v is not None else [])
    assert ids, "no EOS token id in the model's files (TUFT_MODEL_DIR)"
    return sorted(ids)


@needs(since="0.26.0", why="SampledSequence.sequence_id")
def test_sample_sequence_ids(sc):
    """Sample sequence ids: one per sample, unique (0.26+)"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    scl = tc.save_weights_and_get_sampling_client()
    prompt = types.ModelInput.from_ints([20, 21, 22])
    ids = []
    for _ in range(2):
        res = scl.sample(prompt, num_samples=3, sampling_params=types.SamplingParams(max_tokens=3)).result()
        assert len(res.sequences) == 3
        ids += [s.sequence_id for s in res.sequences]
    assert all(ids) and len(set(ids)) == len(ids), ids
    assert scl.compute_logprobs(prompt).result()[1] is not None


def test_resume_weights_only(sc):
    """Resume weights only: same rank, same forward loss"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=8, seed=4)
    data = sft_batch(seed=7)
    for _ in range(2):
        tc.forward_backward(data, "cross_entropy").result()
        tc.optim_step(ADAM).result()
    path = tc.save_state("weights-only").result().path
    resumed = sc.create_training_client_from_state(path)
    probe = sft_batch(seed=8)
    a = loss_of(tc.forward(probe, "cross_entropy").result())
    b = loss_of(resumed.forward(probe, "cross_entropy").result())
    assert a == b, (a, b)
    assert resumed.get_info().lora_rank == 8


@needs(since="0.27.2", why="ServiceClient.close")
def test_close_finishes_the_session():
    """close(): session finished (first reason wins), then 410"""
    sc = client()
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    tc.forward_backward(sft_batch(n=1), "cross_entropy").result()
    sess = session_of(tc)
    done = sc.close("success", detail="conformance")
    if hasattr(done, "result"):
        done.result()
    code, body = raw("GET", f"/api/v1/sessions/{sess}")
    assert code == 200 and body["status"] == {"type": "client_finished", "reason": {"type": "success"}, "detail": "conformance"}, body
    # First wins; afterwards the session's operations and heartbeats get 410.
    code, body = raw("POST", f"/api/v1/sessions/{sess}/finish", {"reason": {"type": "errored"}, "detail": None})
    assert code == 200 and body["status"]["reason"]["type"] == "success", body
    code, body = raw("POST", "/api/v1/session_heartbeat", {"session_id": sess, "type": "session_heartbeat"})
    assert code == 410, (code, body)
    code, body = raw("POST", "/api/v1/optim_step", {"model_id": tc.model_id, "seq_id": 2, "adam_params": {"learning_rate": 1e-3}})
    assert code == 410 and "finished" in body["detail"], (code, body)


@needs(since="0.29.1", why="ServiceClient as a context manager")
def test_with_block_finishes_the_session():
    """with ServiceClient(): success, or errored when the block raises"""
    with client() as sc:
        tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
        tc.forward_backward(sft_batch(n=1), "cross_entropy").result()
    code, body = raw("GET", f"/api/v1/sessions/{session_of(tc)}")
    assert code == 200 and body["status"]["type"] == "client_finished" and body["status"]["reason"]["type"] == "success", body
    with pytest.raises(ValueError):
        with client() as sc:
            run_id = sc.create_lora_training_client(base_model=MODEL, rank=4).model_id
            raise ValueError("user code failed")
    code, body = raw("GET", f"/api/v1/sessions/{run_id.split(':train:')[0]}")
    assert body["status"]["reason"]["type"] == "errored", body


@needs(since="0.30.4", why="optimizer selection (Dimuon types final in 0.30.4)")
def test_optimizer_config_and_params(sc):
    """Dimuon: optimizer_config echoed, optimizer_params run, Adam's refused naming both, resume continues exactly"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4, optimizer=types.AdamOptimizerConfig())
    assert tc.get_info().optimizer_config.type == "adamw"
    dm = sc.create_lora_training_client(base_model=MODEL, rank=4, seed=3, optimizer=types.DimuonOptimizerConfig())
    info = dm.get_info().optimizer_config
    assert info.type == "dimuon" and getattr(info, "version", None) == 1, info
    data = sft_batch(seed=9)
    losses = []
    for _ in range(4):
        losses.append(loss_of(dm.forward_backward(data, "cross_entropy").result()))
        out = dm.optim_step(types.DimuonParams(learning_rate=0.02, grad_clip_norm=1.0)).result()
        assert out.metrics["learning_rate:max"] == 0.02, out.metrics
    assert losses[-1] < losses[0], losses
    # The other family's parameters name both (and use up their seq_id: no hole).
    raises_promptly(lambda: dm.optim_step(types.AdamParams(learning_rate=1e-3)).result(), "adamw", "dimuon")
    raises_promptly(lambda: tc.optim_step(types.DimuonParams(learning_rate=1e-3)).result(), "adamw", "dimuon")
    # Dimuon's momentum is saved and restored: the resumed run continues exactly.
    path = dm.save_state("dimuon-state").result().path
    resumed = sc.create_training_client_from_state_with_optimizer(path)
    if hasattr(resumed, "result"):
        resumed = resumed.result()
    assert resumed.get_info().optimizer_config.type == "dimuon"
    nxt = sft_batch(seed=10)
    a, b = [], []
    for client_, out in ((dm, a), (resumed, b)):
        for _ in range(2):
            out.append(loss_of(client_.forward_backward(nxt, "cross_entropy").result()))
            client_.optim_step(types.DimuonParams(learning_rate=0.02, grad_clip_norm=1.0)).result()
    print("dimuon losses", losses, "original", a, "resumed", b)
    assert a == b, "a Dimuon run resumed with its optimizer must continue exactly like the original"
    t0 = time.time()
    out = tc.optim_step(types.AdamParams(learning_rate=0.0125)).result()
    assert out.metrics["learning_rate:max"] == 0.0125, out.metrics
    assert time.time() - t0 < 5, "the step after a refused one waited"


@needs(since="0.27.1", why="user_metadata on saves")
def test_checkpoint_user_metadata(sc):
    """Checkpoint user_metadata: stored, listed, replaced on overwrite"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    path = tc.save_state("md", user_metadata={"step": "1", "tag": "a"}).result().path
    run_id = path.split("/")[2]
    rest = sc.create_rest_client()

    def meta():
        return next(c for c in rest.list_checkpoints(run_id).result().checkpoints if c.tinker_path == path).user_metadata

    assert meta() == {"step": "1", "tag": "a"}
    tc.save_state("md", overwrite=True, user_metadata={"step": "2"}).result()
    assert meta() == {"step": "2"}
    sp = tc.save_weights_for_sampler("md-s", user_metadata={"k": "v"}).result().path
    assert next(c for c in rest.list_checkpoints(run_id).result().checkpoints if c.tinker_path == sp).user_metadata == {"k": "v"}


@needs(since="0.27.1", why="user_metadata on saves")
def test_quota_refusal_is_raised_not_retried(sc, record_property):
    """A quota refusal (413/403) is raised at once naming the limit; the run goes on"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    tc.forward_backward(sft_batch(n=1), "cross_entropy").result()
    big = {"blob": "x" * (70 << 10)}  # over limits.max_metadata_bytes (64 KiB by default)
    msg = raises_promptly(lambda: tc.save_state("too-big", user_metadata=big).result(), "limits.max_metadata_bytes", limit=10.0)
    record_property("quota_refusal", msg[:120])
    t0 = time.time()
    out = tc.forward_backward(sft_batch(n=1), "cross_entropy").result()
    assert math.isfinite(loss_of(out))
    assert time.time() - t0 < 1.0, "the operation after a quota refusal waited for its seq_id"


@needs(since="0.34.0", why="ServiceClient(display_name=...)")
def test_session_display_name_and_metadata():
    """Session display_name and user_metadata (GET session)"""
    sc = tinker.ServiceClient(base_url=BASE_URL, api_key=KEY_A, display_name="conformance run", user_metadata={"suite": "conformance"})
    run_id = sc.create_lora_training_client(base_model=MODEL, rank=4).model_id
    # (The run id is read first: SDK 0.38 can deadlock creating a REST client while a
    # training client it has not finished creating waits for the same holder lock.)
    info = sc.create_rest_client().get_session(run_id.split(":train:")[0]).result()
    assert info.display_name == "conformance run" and info.user_metadata == {"suite": "conformance"}, info
    assert run_id in info.training_run_ids


def test_stop_empty_list_disables_eos(sc):
    """stop=[] runs to max_tokens past EOS; default stops at EOS"""
    eos = eos_ids()
    tc = sc.create_lora_training_client(base_model=MODEL, rank=8, seed=5)
    prompt = [30, 31, 32, 33]
    # Teach the adapter to end this prompt with EOS at once.
    data = [types.Datum(model_input=types.ModelInput.from_ints(prompt),
                        loss_fn_inputs={"target_tokens": prompt[1:] + [eos[0]], "weights": [0.0, 0.0, 0.0, 1.0]})]
    for _ in range(25):
        tc.forward_backward(data, "cross_entropy").result()
        tc.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    scl = tc.save_weights_and_get_sampling_client()
    mi = types.ModelInput.from_ints(prompt)
    default = scl.sample(mi, 1, types.SamplingParams(max_tokens=8, temperature=0.0)).result().sequences[0]
    assert default.stop_reason == "stop" and default.tokens[-1] in eos and len(default.tokens) < 8, default
    none = scl.sample(mi, 1, types.SamplingParams(max_tokens=8, temperature=0.0, stop=[])).result().sequences[0]
    assert none.stop_reason == "length" and len(none.tokens) == 8, none
    assert none.tokens[: len(default.tokens)] == default.tokens


@needs(since="0.33.0", why="prompt_logprobs_last_n")
def test_prompt_logprobs_last_n(sc):
    """prompt_logprobs_last_n: only the last N prompt tokens scored"""
    scl = sc.create_sampling_client(base_model=MODEL)
    prompt = types.ModelInput.from_ints([40, 41, 42, 43, 44, 45])
    lps = scl.compute_logprobs(prompt, prompt_logprobs_last_n=2).result()
    assert len(lps) == 6 and all(x is None for x in lps[:4]) and all(x is not None and x <= 0 for x in lps[4:]), lps
    res = scl.sample(prompt, 1, types.SamplingParams(max_tokens=1), include_prompt_logprobs=True, topk_prompt_logprobs=3,
                     prompt_logprobs_last_n=3).result()
    assert all(x is None for x in res.prompt_logprobs[:3]) and all(x is not None for x in res.prompt_logprobs[3:]), res.prompt_logprobs
    assert all(len(row or []) == 3 for row in res.topk_prompt_logprobs[3:]), res.topk_prompt_logprobs
    raises_promptly(lambda: scl.compute_logprobs(prompt, prompt_logprobs_last_n=6).result(), "prompt_logprobs_last_n")


@needs(since="0.38.0", why="save_weights_and_get_sampling_client(kind=...)")
def test_inflight_sampling_client(sc):
    """kind="inflight" sampling clients follow the run's newest inflight save"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4, seed=2)
    prompt = types.ModelInput.from_ints([60, 61, 62, 63, 64])
    a = tc.save_weights_and_get_sampling_client(kind="inflight")
    if hasattr(a, "result"):
        a = a.result()
    w1 = a.compute_logprobs(prompt).result()
    for _ in range(3):
        tc.forward_backward(sft_batch(seed=11), "cross_entropy").result()
        tc.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    assert a.compute_logprobs(prompt).result() == w1, "the inflight target changed without an inflight save"
    b = tc.save_weights_and_get_sampling_client(kind="inflight")
    if hasattr(b, "result"):
        b = b.result()
    w2 = b.compute_logprobs(prompt).result()
    assert w2 != w1, "training did not change the weights"
    assert a.compute_logprobs(prompt).result() == w2, "the earlier inflight client did not follow the next save"
    res = a.sample(prompt, 2, types.SamplingParams(max_tokens=3, seed=1)).result()
    assert len(res.sequences) == 2


def refused_features():
    """The features of newer releases this server refuses, as (min SDK, name, call)."""
    return [
        ("0.35.0", "stable_reinforce", lambda tc, scl: tc.forward_backward(sft_batch(n=1), "stable_reinforce").result()),
    ]


@needs(since="0.30.0", why="the refused features arrived from 0.30 on")
def test_newer_features_are_refused_by_name(sc):
    """Refused features (stable_reinforce, stability records) named, with why; training goes on"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    scl = sc.create_sampling_client(base_model=MODEL)
    tried = []
    for since, name, call in refused_features():
        if SDK < _version(since):
            continue
        raises_promptly(lambda: call(tc, scl), name)
        tried.append(name)
        t0 = time.time()
        out = tc.forward_backward(sft_batch(n=1), "cross_entropy").result()
        assert math.isfinite(loss_of(out)) and time.time() - t0 < 5, f"after refusing {name}"
    if SDK >= _version("0.30.0"):
        stability = sc.create_sampling_client(base_model=MODEL, record_stability_info=True)
        raises_promptly(lambda: stability.sample(types.ModelInput.from_ints([1, 2]), 1, types.SamplingParams(max_tokens=2)).result(),
                        "record_stability_info")
        tried.append("record_stability_info")
    print("refused:", tried)


# The sampling outputs of 0.29-0.31 (docs/compatibility.md, "Sampling outputs").
OUT_PROMPT = [23, 7, 301, 45, 45, 12, 99, 5]


@needs(since="0.29.0", why="SampleRequest.topk_sample_logprobs")
def test_sampling_outputs_topk_sample_logprobs(sc):
    """topk_sample_logprobs: top-k per sampled token; top-1 is the greedy token"""
    scl = sc.create_sampling_client(base_model=MODEL)
    prompt = types.ModelInput.from_ints(OUT_PROMPT)
    res = scl.sample(prompt, 2, types.SamplingParams(max_tokens=5, temperature=0.0), topk_sample_logprobs=4).result()
    for seq in res.sequences:
        top = seq.topk_logprobs
        assert top is not None and len(top) == len(seq.tokens), (top, seq.tokens)
        for tok, lp, row in zip(seq.tokens, seq.logprobs, top):
            assert len(row) == 4 and all(0 <= t < VOCAB for t, _ in row), row
            assert row[0][0] == tok and abs(row[0][1] - lp) < 1e-5, (tok, lp, row)
            assert all(row[i][1] >= row[i + 1][1] for i in range(3)), row
    # At a temperature, the sampled token's logprob is that of its own entry when listed.
    res = scl.sample(prompt, 3, types.SamplingParams(max_tokens=6, temperature=0.8, seed=3), topk_sample_logprobs=8).result()
    listed = 0
    for seq in res.sequences:
        for tok, lp, row in zip(seq.tokens, seq.logprobs, seq.topk_logprobs):
            for t, l in row:
                if t == tok:
                    listed += 1
                    assert abs(l - lp) < 1e-5, (tok, lp, row)
    assert listed > 0, "no sampled token among its top 8"
    plain = scl.sample(prompt, 1, types.SamplingParams(max_tokens=2)).result()
    assert plain.sequences[0].topk_logprobs is None
    raises_promptly(lambda: scl.sample(prompt, 1, types.SamplingParams(max_tokens=2), topk_sample_logprobs=1000).result(),
                    "max_topk_sample_logprobs")


@needs(since="0.30.0", why="SampleRequest.target_prompt_logprobs")
def test_sampling_outputs_target_prompt_logprobs(sc):
    """target_prompt_logprobs (dense and CSR): equal to prompt_logprobs for the next token"""
    scl = sc.create_sampling_client(base_model=MODEL)
    prompt = types.ModelInput.from_ints(OUT_PROMPT)
    n = len(OUT_PROMPT)
    ids = np.full((n - 1, 3), -1, dtype=np.int64)
    ids[:, 0] = OUT_PROMPT[1:]  # row i scores prompt position i + 1
    ids[3:, 2] = 17
    res = scl.sample(prompt, 1, types.SamplingParams(max_tokens=1), include_prompt_logprobs=True,
                     target_prompt_logprobs=types.TensorData.from_numpy(ids)).result()
    got = res.target_prompt_logprobs
    assert got is not None and list(got.shape) == [n - 1, 3] and got.dtype == "float32", got
    dense = np.asarray(got.data, dtype=np.float32).reshape(n - 1, 3)
    for i in range(n - 1):
        assert abs(dense[i, 0] - res.prompt_logprobs[i + 1]) < 1e-5, (i, dense[i], res.prompt_logprobs)
        assert dense[i, 1] == 0.0, dense[i]  # a -1 cell
        assert (dense[i, 2] < 0) == (i >= 3), dense[i]
    # The same cells in CSR form (what TensorData.from_torch_sparse(ids, pad_value=-1) sends).
    crow, col, vals = [0], [], []
    for i in range(n - 1):
        for j in range(3):
            if ids[i, j] != -1:
                col.append(j)
                vals.append(int(ids[i, j]))
        crow.append(len(vals))
    sparse = types.TensorData(data=vals, dtype="int64", shape=[n - 1, 3], sparse_crow_indices=crow, sparse_col_indices=col)
    res2 = scl.sample(prompt, 1, types.SamplingParams(max_tokens=1), target_prompt_logprobs=sparse).result()
    got2 = res2.target_prompt_logprobs
    assert list(got2.sparse_crow_indices) == crow and list(got2.sparse_col_indices) == col, got2
    for i in range(n - 1):
        for x in range(crow[i], crow[i + 1]):
            assert abs(float(got2.data[x]) - dense[i, col[x]]) < 1e-5, (i, x)
    bad = types.TensorData.from_numpy(np.full((n - 2, 1), 5, dtype=np.int64))
    raises_promptly(lambda: scl.sample(prompt, 1, types.SamplingParams(max_tokens=1), target_prompt_logprobs=bad).result(),
                    "target_prompt_logprobs")


@needs(since="0.31.0", why="SampleRequest.prompt_alt_tokens_k")
def test_sampling_outputs_prompt_alt_tokens(sc):
    """prompt_alt_tokens_k: k draws per prompt position; greedy draws are the top-1"""
    scl = sc.create_sampling_client(base_model=MODEL)
    prompt = types.ModelInput.from_ints(OUT_PROMPT)
    n = len(OUT_PROMPT)
    res = scl.sample(prompt, 1, types.SamplingParams(max_tokens=1, temperature=1.0, seed=4), prompt_alt_tokens_k=4).result()
    alt = res.prompt_alt_tokens
    assert alt is not None and list(alt.tokens.shape) == [n - 1, 4] and list(alt.logprobs.shape) == [n - 1, 4], alt
    toks = np.asarray(alt.tokens.data).reshape(n - 1, 4)
    lps = np.asarray(alt.logprobs.data, dtype=np.float32).reshape(n - 1, 4)
    assert ((toks >= 0) & (toks < VOCAB)).all() and (lps <= 0).all() and np.isfinite(lps).all(), (toks, lps)
    assert len(set(toks.ravel().tolist())) > 4, toks  # draws, not a constant
    # The same seed draws the same alternatives; temperature 0 draws the most likely token.
    again = scl.sample(prompt, 1, types.SamplingParams(max_tokens=1, temperature=1.0, seed=4), prompt_alt_tokens_k=4).result()
    assert (np.asarray(again.prompt_alt_tokens.tokens.data).reshape(n - 1, 4) == toks).all()
    greedy = scl.sample(prompt, 1, types.SamplingParams(max_tokens=1, temperature=0.0), prompt_alt_tokens_k=2,
                        include_prompt_logprobs=True, topk_prompt_logprobs=1).result()
    gt = np.asarray(greedy.prompt_alt_tokens.tokens.data).reshape(n - 1, 2)
    gl = np.asarray(greedy.prompt_alt_tokens.logprobs.data, dtype=np.float32).reshape(n - 1, 2)
    for i in range(n - 1):
        best_tok, best_lp = greedy.topk_prompt_logprobs[i + 1][0]
        assert (gt[i] == best_tok).all() and abs(gl[i, 0] - best_lp) < 1e-5, (i, gt[i], gl[i], best_tok, best_lp)
    raises_promptly(lambda: scl.sample(prompt, 1, types.SamplingParams(max_tokens=1), prompt_alt_tokens_k=1000).result(),
                    "max_prompt_alt_tokens_k")


def test_no_seq_hole_after_a_400(sc, record_property):
    """A 400 (unknown loss) is followed by a normal operation within a second"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    tc.forward_backward(sft_batch(n=1), "cross_entropy").result()
    raises_promptly(lambda: tc.forward_backward(sft_batch(n=1), "not_a_loss").result(), "not_a_loss")
    t0 = time.time()
    out = tc.forward_backward(sft_batch(n=1), "cross_entropy").result()
    elapsed = time.time() - t0
    record_property("next_op_after_400_ms", round(elapsed * 1000))
    assert math.isfinite(loss_of(out))
    assert elapsed < 1.0, f"the next operation took {elapsed:.2f}s: a seq_id hole held it"


# ---- Issue 15: the rest of what SDK 0.38 offers.

import base64
import concurrent.futures
import subprocess
import sys
import tempfile


def sampler_id(scl):
    """The sampling session id behind a SamplingClient (its public handle carries it)."""
    return json.loads(base64.urlsafe_b64decode(scl.get_sampler_handle()))["sampling_session_id"]


@needs(since="0.32.0", why="sampler handles and join_sampling_session")
def test_retrieve_futures_and_clones(sc):
    """retrieve_futures polling; cloned clients numbered by join_sampling_session"""
    code, cfg = raw("POST", "/api/v1/client/config", {"sdk_version": tinker.__version__})
    assert cfg["sample_use_retrieve_futures"] and cfg["sample_join_sampling_session"], cfg
    scl = sc.create_sampling_client(base_model=MODEL)
    handle = scl.get_sampler_handle()
    clones = [tinker.SamplingClient.from_sampler_handle(handle, api_key=KEY_A) for _ in range(2)]
    prompt = types.ModelInput.from_ints([5, 6, 7])
    futs = [c.sample(prompt, 2, types.SamplingParams(max_tokens=4, seed=i)) for i, c in enumerate([scl] + clones) for _ in range(4)]
    results = [f.result() for f in futs]
    ids = [s.sequence_id for r in results for s in r.sequences]
    assert len(ids) == 24 and len(set(ids)) == 24, ids
    # The two clones joined the session (counters 1 and 2): the next join gets 3.
    code, body = raw("POST", "/api/v1/join_sampling_session", {"sampling_session_id": sampler_id(scl)})
    assert code == 200 and body["client_counter"] == 3, (code, body)
    # A poll from the start: everything the clients retrieved was acknowledged (trimmed).
    code, body = raw("POST", "/api/v1/retrieve_futures", {"target": {"type": "sampling_session", "sampling_session_id": sampler_id(scl),
                                                                     "cloned_sampler_id": 0}, "prev_cursor": 0, "timeout": 0,
                                                          "retrieved_request_ids": []})
    assert code == 200 and isinstance(body["cursor"], int), body


@needs(since="0.32.0", why="sampler handles (the sampling session id); cancel_future is sent from 0.26")
def test_abandoned_sample_is_cancelled(sc, record_property):
    """An abandoned sample is cancelled on the server (cancel_future): it stops at once"""
    code, dyn = raw("POST", "/api/v1/client/dynamic_config", {"sdk_version": tinker.__version__})
    assert dyn["sample_cancel_enabled"], dyn
    scl = sc.create_sampling_client(base_model=MODEL)
    sid = sampler_id(scl)
    # Watch the session's completions from before the request, so the failure is seen
    # whatever the SDK's own poller acknowledges.
    watch = concurrent.futures.ThreadPoolExecutor(1).submit(
        raw, "POST", "/api/v1/retrieve_futures",
        {"target": {"type": "sampling_session", "sampling_session_id": sid, "cloned_sampler_id": 0}, "prev_cursor": 0,
         "timeout": 25, "retrieved_request_ids": []})
    long = scl.sample(types.ModelInput.from_ints([1, 2, 3]), 64, types.SamplingParams(max_tokens=1000, stop=[], temperature=1.0))
    with pytest.raises((TimeoutError, concurrent.futures.TimeoutError)):
        long.result(timeout=1.0)
    # The caller gives up (cancels the future): the SDK sends cancel_future.
    (long.future() if hasattr(long, "future") else long).cancel()
    t0 = time.time()
    code, body = watch.result(timeout=40)
    assert code == 200 and len(body["completions"]) == 1 and body["completions"][0]["state"] == "failed", body
    record_property("cancel_to_failed_ms", round((time.time() - t0) * 1000))
    code, res = raw("POST", "/api/v1/retrieve_future", {"request_id": body["completions"][0]["request_id"]})
    assert "cancelled by the client" in res.get("error", ""), res
    # The sampler works on.
    assert len(scl.sample(types.ModelInput.from_ints([1, 2]), 1, types.SamplingParams(max_tokens=2)).result().sequences) == 1


@needs(since="0.33.0", why="save_weights_external with age_encryption_recipients")
def test_save_weights_external(sc):
    """save_weights_external: PEFT files behind signed links, age-encrypted on request; listed, TTL, deleted"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    tc.forward_backward(sft_batch(n=2), "cross_entropy").result()
    tc.optim_step(ADAM).result()
    res = tc.save_weights_external("export", ttl_seconds=3600).result()
    assert res.path.endswith("/external_weights/export"), res
    rest = sc.create_rest_client()
    urls = rest.get_external_weights_urls(res.path).result()
    assert sorted(urls.urls) == ["adapter_config.json", "adapter_model.safetensors"], urls
    files = {}
    for name, url in urls.urls.items():
        with urllib.request.urlopen(url, timeout=30) as r:  # no API key: the link is signed
            files[name] = r.read()
    cfg = json.loads(files["adapter_config.json"])
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 4, cfg
    n = int.from_bytes(files["adapter_model.safetensors"][:8], "little")  # safetensors: header length, JSON header
    assert any(k.endswith("lora_A.weight") for k in json.loads(files["adapter_model.safetensors"][8:8 + n]))
    # Encrypted to an x25519 recipient: only .age files, each an age file. A key that is
    # not one is refused by name (and its seq_id settled).
    raises_promptly(lambda: tc.save_weights_external("bad", age_encryption_recipients=["age1notakey"]).result(), "age_encryption_recipients")
    enc = tc.save_weights_external("enc", age_encryption_recipients=[AGE_RECIPIENT]).result()
    eurls = rest.get_external_weights_urls(enc.path).result()
    assert sorted(eurls.urls) == ["adapter_config.json.age", "adapter_model.safetensors.age"], eurls
    with urllib.request.urlopen(eurls.urls["adapter_config.json.age"], timeout=30) as r:
        assert r.read().startswith(b"age-encryption.org/v1\n")
    run_id = res.path.split("/")[2]
    listed = {c.tinker_path: c for c in rest.list_checkpoints(run_id).result().checkpoints}
    assert listed[res.path].checkpoint_type == "external" and listed[res.path].expires_at is not None, listed
    assert listed[res.path].size_bytes == sum(len(b) for b in files.values()), listed[res.path]
    rest.delete_checkpoint_from_tinker_path(res.path).result()
    assert res.path not in {c.tinker_path for c in rest.list_checkpoints(run_id).result().checkpoints}
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(urls.urls["adapter_config.json"], timeout=30)


# An x25519 public key whose identity was discarded: only the format of what comes back
# is checked here (api/external_test.go decrypts with identities it generates).
AGE_RECIPIENT = "age1070jn9yhxjwdra2qutp6eh6dvgqr47qk3fl77exmms9v0humwywq7ld4l8"


@needs(since="0.38.0", why="the CLI's checkpoint download (create-via-load to export a training checkpoint)")
def test_cli_checkpoint_download(sc):
    """tinker checkpoint download: a training checkpoint exported and downloaded as PEFT files"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    path = tc.save_state("cli-download").result().path
    out = tempfile.mkdtemp()
    env = dict(os.environ, TINKER_API_KEY=KEY_A, TINKER_BASE_URL=BASE_URL)
    cli = os.path.join(os.path.dirname(sys.executable), "tinker")
    p = subprocess.run([cli, "checkpoint", "download", path, "--output", out], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    target = os.path.join(out, path.replace("tinker://", "").replace("/", "_"))
    assert sorted(os.listdir(target)) == ["adapter_config.json", "adapter_model.safetensors"], os.listdir(target)
    # The temporary export was deleted.
    left = [c.tinker_path for c in sc.create_rest_client().list_user_checkpoints().result().checkpoints
            if c.tinker_path.endswith("/external_weights/download")]
    assert not left, left


@needs(since="0.34.0", why="RestClient.copy_weights(path, destination_project_id)")
def test_copy_weights(sc):
    """copy_weights: into the caller's project (idempotent), never another tenant's"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4, seed=6)
    path = tc.save_state("to-copy").result().path
    rest = sc.create_rest_client()
    copy = rest.copy_weights(path, "alice", ttl_seconds=3600).result()
    assert copy.startswith("tinker://") and copy.endswith("/weights/to-copy") and copy != path, copy
    # The copy trains like its source.
    a = sc.create_training_client_from_state(copy)
    if hasattr(a, "result"):
        a = a.result()
    probe = sft_batch(seed=12)
    assert loss_of(a.forward(probe, "cross_entropy").result()) == loss_of(tc.forward(probe, "cross_entropy").result())
    raises_promptly(lambda: rest.copy_weights(path, "bob").result(), "not found")
    bob = client(KEY_B).create_rest_client()
    raises_promptly(lambda: bob.copy_weights(path, "bob").result(), "not found")


@needs(since="0.36.0", why="RestClient.search_sessions")
def test_search_sessions():
    """sessions/search: display name, metadata, status filters and cursor paging"""
    tag = f"search-{time.time_ns()}"
    made = []
    for i in range(3):
        c = tinker.ServiceClient(base_url=BASE_URL, api_key=KEY_A, display_name=f"{tag} run {i}", user_metadata={"tag": tag, "i": str(i)})
        made.append(session_of(c.create_lora_training_client(base_model=MODEL, rank=4)))
    rest = tinker.RestClient(base_url=BASE_URL, api_key=KEY_A) if hasattr(tinker, "RestClient") else client().create_rest_client()
    req = types.SessionSearchRequest(display_name=tag, limit=2)
    page = rest.search_sessions(req).result()
    got = [s.session_id for s in page.sessions]
    while page.next_cursor is not None:
        page = rest.search_sessions(req.model_copy(update={"cursor": page.next_cursor})).result()
        got += [s.session_id for s in page.sessions]
    assert got == made[::-1], (got, made)
    one = rest.search_sessions(types.SessionSearchRequest(user_metadata={"tag": tag, "i": "1"})).result().sessions
    assert [s.session_id for s in one] == [made[1]] and one[0].display_name == f"{tag} run 1" and one[0].owner, one
    active = rest.search_sessions(types.SessionSearchRequest(display_name=tag, statuses=[types.ActiveSessionStatusQuery()])).result()
    assert len(active.sessions) == 3


@needs(since="0.36.0", why="AdminClient.get_current_checkpoint_storage_usage")
def test_checkpoint_storage_usage(sc):
    """Checkpoint storage report: the tenant's checkpoints counted and measured on disk"""
    admin = tinker.AdminClient(base_url=BASE_URL, api_key=KEY_B)
    before = admin.get_current_checkpoint_storage_usage().result()
    n0 = sum(d.checkpoint_count for d in before.data)
    b0 = sum(d.size_bytes for d in before.data)
    bob = client(KEY_B)
    tc = bob.create_lora_training_client(base_model=MODEL, rank=4)
    tc.save_state("usage").result()
    listed = [c for c in bob.create_rest_client().list_checkpoints(tc.model_id).result().checkpoints]
    after = admin.get_current_checkpoint_storage_usage().result()
    assert sum(d.checkpoint_count for d in after.data) == n0 + 1, after
    assert sum(d.size_bytes for d in after.data) == b0 + sum(c.size_bytes or 0 for c in listed), after


@needs(since="0.36.0", why="AdminClient.get_billing_usage")
def test_billing_usage_events():
    """Billing usage events: hourly tokens trained, prefilled and sampled, per session, priced"""
    from datetime import datetime, timedelta, timezone

    bob = tinker.ServiceClient(base_url=BASE_URL, api_key=KEY_B, user_metadata={"purpose": "billing"})
    tc = bob.create_lora_training_client(base_model=MODEL, rank=4)
    sess = tc.model_id.split(":train:")[0]
    tc.forward_backward(sft_batch(n=3, length=20), "cross_entropy").result()
    tc.optim_step(ADAM).result()
    scl = bob.create_sampling_client(base_model=MODEL)
    res = scl.sample(types.ModelInput.from_ints(OUT_PROMPT), 2, types.SamplingParams(max_tokens=6)).result()
    sampled = sum(len(s.tokens) for s in res.sequences)
    hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    start, end = hour - timedelta(hours=1), hour + timedelta(hours=2)
    admin = tinker.AdminClient(base_url=BASE_URL, api_key=KEY_B)
    usage = admin.get_billing_usage(start, end).result()
    tokens = {}
    for e in usage.data:
        assert e.bucket_end - e.bucket_start == timedelta(hours=1) and e.user_id == "bob", e
        if e.session_id != sess:
            continue
        assert e.base_model == MODEL and e.estimated_cost_usd == 0 and e.effective_rate_usd_per_million_tokens == 0, e
        kind = e.event_info.type + (":cached" if getattr(e.event_info, "cached", False) else "")
        tokens[kind] = tokens.get(kind, 0) + e.event_info.token_count
    assert tokens.get("training") == 3 * 20, tokens
    assert tokens.get("sampling_sample") == sampled, tokens
    assert tokens.get("sampling_prefill", 0) + tokens.get("sampling_prefill:cached", 0) == len(OUT_PROMPT), tokens
    assert usage.sessions[sess].user_metadata == {"purpose": "billing"}, usage.sessions
    # Another tenant sees none of it; a window off the hour, too long or in the future is refused by name.
    alice = tinker.AdminClient(base_url=BASE_URL, api_key=KEY_A).get_billing_usage(start, end).result()
    assert all(e.session_id != sess for e in alice.data) and sess not in alice.sessions
    raises_promptly(lambda: admin.get_billing_usage(start + timedelta(minutes=30), end).result(), "starting_on", "hour")
    raises_promptly(lambda: admin.get_billing_usage(start - timedelta(days=15), start).result(), "14 days")
    raises_promptly(lambda: admin.get_billing_usage(hour + timedelta(hours=3), hour + timedelta(hours=4)).result(), "future")


@needs(since="0.38.0", why="the CLI's tinker auth login / logout")
def test_cli_auth_login(tmp_path):
    """auth/apikey/me: tinker auth login verifies the key; deleting a configured key is refused"""
    env = dict(os.environ, HOME=str(tmp_path), TINKER_BASE_URL=BASE_URL)
    env.pop("TINKER_API_KEY", None)
    cli = os.path.join(os.path.dirname(sys.executable), "tinker")
    p = subprocess.run([cli, "auth", "login"], input=KEY_A + "\n", env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "alice" in p.stdout, p.stdout + p.stderr
    bad = subprocess.run([cli, "auth", "logout"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 0, bad.stdout + bad.stderr
    p = subprocess.run([cli, "auth", "login"], input="tml-not-a-key\n", env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "invalid API key" in (p.stdout + p.stderr), p.stdout + p.stderr
    code, body = raw("DELETE", "/api/v1/auth/apikey/me")
    assert code == 403 and "auth.api_keys" in body["detail"], (code, body)


@needs(since="0.35.0", why="string-valued loss_fn_config (0.26.2) and zero-length provenance spans (0.35)")
def test_string_loss_config_and_provenance(sc):
    """String loss config values refused by key (no loss defines one); provenance spans accepted"""
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    scl = sc.create_sampling_client(base_model=MODEL)
    prompt = [20, 21, 22]
    seq = scl.sample(types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=4, seed=3)).result().sequences[0]
    toks = list(seq.tokens)
    d = types.Datum(model_input=types.ModelInput.from_ints(prompt + toks[:-1]),
                    loss_fn_inputs={"target_tokens": prompt[1:] + toks, "weights": [0.0] * (len(prompt) - 1) + [1.0] * len(toks)})
    d = d.with_provenance(
        model_input=[types.PromptProvenanceSpan(sequence_id=seq.sequence_id, length=len(prompt)),
                     types.SampledProvenanceSpan(sequence_id=seq.sequence_id, length=len(toks) - 1)],
        loss_fn_inputs=[types.PromptProvenanceSpan(sequence_id=seq.sequence_id, offset=1, length=len(prompt) - 1),
                        types.SampledProvenanceSpan(sequence_id=seq.sequence_id, length=len(toks))])
    out = tc.forward_backward([d], "cross_entropy").result()
    assert math.isfinite(loss_of(out))
    raises_promptly(lambda: tc.forward_backward([d], "ppo", loss_fn_config={"clip_mode": "sequence"}).result(), "clip_mode")
    assert math.isfinite(loss_of(tc.forward_backward([d], "cross_entropy").result()))


# ---- Issue 27: the session trace export and the audit log (docs/compatibility.md).
import datetime


@needs(since="0.38.0", why="RestClient.export_session_trace")
def test_export_session_trace():
    """export_session_trace: a signed link to a Perfetto trace of the session's own spans"""
    sc = client()
    tc = sc.create_lora_training_client(base_model=MODEL, rank=4)
    tc.forward_backward(sft_batch(n=1), "cross_entropy").result()
    tc.optim_step(ADAM).result()
    sess = session_of(tc)
    rest = tinker.RestClient(base_url=BASE_URL, api_key=KEY_A)
    # The spans of the last request are recorded as they end, just after its result.
    deadline = time.time() + 10
    while True:
        url = rest.export_session_trace(sess).result()
        assert url.startswith(BASE_URL + "/"), url
        data = urllib.request.urlopen(url, timeout=30).read()  # a plain GET: no key
        if b"training_controller.run_optim_step" in data or time.time() > deadline:
            break
        time.sleep(0.2)
    # Trace.packet is field 1, length-delimited: the file starts with tag 0x0a; the root
    # track names the session; every slice is named after its span.
    assert data[:1] == b"\x0a", data[:16]
    assert f"session {sess}".encode() in data
    for name in (b"POST /api/v1/forward_backward", b"training_controller.run_forward_backward",
                 b"hf_model.forward_backward", b"training_controller.run_optim_step"):
        assert name in data, name
    other = tinker.RestClient(base_url=BASE_URL, api_key=KEY_B)
    raises_promptly(lambda: other.export_session_trace(sess).result(), "not found")


@needs(since="0.38.0", why="AdminClient.get_audit_log")
def test_audit_log():
    """Audit log: the tenant's own checkpoint and API-key operations, by event type and day"""
    bob = client(KEY_B)
    tc = bob.create_lora_training_client(base_model=MODEL, rank=4)
    path = tc.save_state("audited").result().path
    run_id = path.split("/")[2]
    rest = tinker.RestClient(base_url=BASE_URL, api_key=KEY_B)
    rest.publish_checkpoint_from_tinker_path(path).result()
    rest.set_checkpoint_ttl_from_tinker_path(path, 7200).result()
    rest.unpublish_checkpoint_from_tinker_path(path).result()
    rest.delete_checkpoint_from_tinker_path(path).result()
    admin = tinker.AdminClient(base_url=BASE_URL, api_key=KEY_B)
    log = admin.get_audit_log().result()
    mine = [e for e in log.entries if e.tinker_path == path]
    assert [e.event for e in mine] == ["checkpoint_save", "checkpoint_publish", "checkpoint_set_ttl",
                                       "checkpoint_unpublish", "checkpoint_delete"], [e.event for e in mine]
    assert all(e.model_id == run_id and e.event_details["actor"] == "bob" for e in mine), mine
    assert mine[2].event_details["ttl_seconds"] == 7200, mine[2]
    ts = [e.timestamp for e in log.entries]
    assert ts == sorted(ts)
    checkpoints = admin.get_audit_log(event_type="checkpoints").result().entries
    assert all(e.event.startswith("checkpoint_") for e in checkpoints) and len(checkpoints) >= 5
    for typ in ("projects", "teams", "organizations"):
        assert admin.get_audit_log(event_type=typ).result().entries == []
    today = datetime.datetime.now(datetime.timezone.utc).date()
    assert [e.event for e in admin.get_audit_log(day=today).result().entries if e.tinker_path == path] == [e.event for e in mine]
    assert admin.get_audit_log(day=datetime.date(2001, 1, 1)).result().entries == []
    alice = tinker.AdminClient(base_url=BASE_URL, api_key=KEY_A).get_audit_log().result()
    assert not [e for e in alice.entries if e.tinker_path == path], "another tenant's operations in the log"
    code, body = raw("GET", "/api/v1/audit?day=not-a-day", key=KEY_B)
    assert code == 400 and "day" in body["detail"], (code, body)
