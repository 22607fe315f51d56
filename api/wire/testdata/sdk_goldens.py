"""Writes api/wire's request goldens as the Tinker SDK sends them, and checks that the SDK
reads the response goldens the server's encoders wrote (api/wire/golden_test.go).

    ~/.cache/tuft/sdk/0.38.0/bin/python api/wire/testdata/sdk_goldens.py write
    ~/.cache/tuft/sdk/0.18.x/bin/python api/wire/testdata/sdk_goldens.py write
    ~/.cache/tuft/sdk/0.38.0/bin/python api/wire/testdata/sdk_goldens.py check
    ~/.cache/tuft/sdk/0.18.x/bin/python api/wire/testdata/sdk_goldens.py check

(scripts/test-all.sh runs both checks.)

write: every request body this SDK release can make, built with the SDK's own types and
serialised by its own code (model_dump as its resources call it; the protobuf
forward_backward through tinker.proto.request_conv), into
golden/requests/sdk-<release>/<route>.json or .pb. Releases before the protobuf body send
forward and forward_backward as JSON.

check: every golden/responses/<name>.json parses as the SDK type the SDK reads that
reply into, and each .pb through the SDK's protobuf response conversion (releases from
0.25 read forward_backward results as protobuf, earlier ones as JSON; sample results are
protobuf from 0.18, so sample_result.json, for clients that do not accept protobuf, is
checked by the Go golden alone).
"""

import json
import os
import sys
from datetime import datetime, timezone
from importlib.metadata import version

import numpy as np
from tinker import types
from tinker._compat import model_dump

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")


def dump(req):
    return json.dumps(model_dump(req, exclude_unset=False, exclude_none=True, mode="json"), separators=(",", ":")).encode()


def tensor(arr):
    return types.TensorData.from_numpy(arr)


def datum(tokens, targets, weights=None, advantages=None, logprobs=None):
    inputs = {"target_tokens": tensor(np.array(targets, dtype=np.int64))}
    if weights is not None:
        inputs["weights"] = tensor(np.array(weights, dtype=np.float32))
    if advantages is not None:
        inputs["advantages"] = tensor(np.array(advantages, dtype=np.float32))
    if logprobs is not None:
        inputs["logprobs"] = tensor(np.array(logprobs, dtype=np.float32))
    return types.Datum(model_input=types.ModelInput.from_ints(tokens), loss_fn_inputs=inputs)


def fwdbwd_input():
    return types.ForwardBackwardInput(
        data=[
            datum([1, 2, 3, 4], [2, 3, 4, 5], weights=[0.0, 1.0, 1.0, 1.0]),
            datum([7, 8, 9], [8, 9, 10], weights=[1.0, 1.0, 0.5]),
        ],
        loss_fn="cross_entropy",
    )


def rl_input():
    return types.ForwardBackwardInput(
        data=[datum([5, 6, 7], [6, 7, 8], advantages=[0.5, -0.25, 1.0], logprobs=[-1.5, -0.75, -2.0])],
        loss_fn="ppo",
        loss_fn_config={"clip_low_threshold": 0.8},
    )


def requests():
    """(route, body, is_proto) of every request this release can build."""
    out = []

    def add(route, *builds):
        """The first of builds (the request as one release or another spells it) that
        this release accepts."""
        errs = []
        for build in builds:
            try:
                out.append((route, build()))
                return
            except (AttributeError, TypeError, ValueError) as e:  # not in this release
                errs.append(f"{type(e).__name__}: {str(e).splitlines()[0]}")
        print(f"  {route}: skipped ({'; '.join(errs)})", file=sys.stderr)

    add("create_session.json", lambda: dump(types.CreateSessionRequest(
        tags=["golden"], user_metadata={"team": "wire"}, sdk_version=version("tinker"))))
    add("session_heartbeat.json", lambda: dump(types.SessionHeartbeatRequest(session_id="sess-1")))
    add("create_sampling_session.json", lambda: dump(types.CreateSamplingSessionRequest(
        session_id="sess-1", sampling_session_seq_id=1, base_model="tuft/tiny")))
    add("create_model.json", lambda: dump(types.CreateModelRequest(
        session_id="sess-1", model_seq_id=0, base_model="tuft/tiny",
        lora_config=types.LoraConfig(rank=8, seed=3, train_unembed=False))))
    add("get_info.json", lambda: dump(types.GetInfoRequest(model_id="run-1")))
    add("unload_model.json", lambda: dump(types.UnloadModelRequest(model_id="run-1")))
    adam = lambda: types.AdamParams(learning_rate=1e-4, beta1=0.9, beta2=0.95, eps=1e-12)  # noqa: E731
    add("optim_step.json",
        lambda: dump(types.OptimStepRequest(model_id="run-1", seq_id=3, optim_params=adam())),
        lambda: dump(types.OptimStepRequest(model_id="run-1", seq_id=3, adam_params=adam())))
    add("save_weights.json", lambda: dump(types.SaveWeightsRequest(model_id="run-1", path="step-4", seq_id=4)))
    add("save_weights_for_sampler.json", lambda: dump(types.SaveWeightsForSamplerRequest(
        model_id="run-1", path="sampler-5", seq_id=5)))
    add("load_weights.json", lambda: dump(types.LoadWeightsRequest(
        model_id="run-1", seq_id=6, path="tinker://run-1/weights/step-4", optimizer=True)))
    add("asample.json", lambda: dump(types.SampleRequest(
        num_samples=2, prompt=types.ModelInput.from_ints([1, 2, 3]), sampling_session_id="samp-1", seq_id=2,
        sampling_params=types.SamplingParams(max_tokens=8, seed=11, temperature=0.7, top_p=0.9, stop=["\n\n"]))))
    add("retrieve_future.json", lambda: dump(types.FutureRetrieveRequest(request_id="req_2")))
    ts = datetime(2026, 11, 1, 12, 0, 0, tzinfo=timezone.utc)
    events = lambda: [types.SessionStartEvent(event="SESSION_START", event_id="ev-1", event_session_index=0, severity="INFO", timestamp=ts)]  # noqa: E731
    add("telemetry.json",
        lambda: dump(types.TelemetrySendRequest(platform="linux", sdk_version=version("tinker"), session_id="sess-1",
                                                process_uuid="0b5b1f2e-6a7c-4d1e-9f00-1a2b3c4d5e6f", events=events())),
        lambda: dump(types.TelemetrySendRequest(platform="linux", sdk_version=version("tinker"), session_id="sess-1", events=events())))

    # Issue 15: Dimuon, inflight samplers, weight export, the sampling and account routes.
    add("create_model_dimuon.json", lambda: dump(types.CreateModelRequest(
        session_id="sess-1", model_seq_id=1, base_model="tuft/tiny", lora_config=types.LoraConfig(rank=8, seed=3),
        optimizer_config=types.DimuonOptimizerConfig())))
    add("optim_step_dimuon.json", lambda: dump(types.OptimStepRequest(model_id="run-1", seq_id=3,
                                                                      optim_params=types.DimuonParams(learning_rate=0.02, grad_clip_norm=1.0))))
    add("save_weights_for_sampler_inflight.json", lambda: dump(types.SaveWeightsForSamplerRequest(
        model_id="run-1", seq_id=5, sampling_session_seq_id=0, kind="inflight")))
    add("save_weights_external.json", lambda: dump(types.SaveWeightsExternalRequest(
        model_id="run-1", path="download", seq_id=7, ttl_seconds=3600,
        age_encryption_recipients=["age1070jn9yhxjwdra2qutp6eh6dvgqr47qk3fl77exmms9v0humwywq7ld4l8"])))
    add("retrieve_futures.json", lambda: dump(types.FuturesRetrieveRequest(
        target=types.SamplingSessionFuturesTarget(sampling_session_id="samp-1", cloned_sampler_id=1), prev_cursor=5, timeout=0,
        retrieved_request_ids=["req_2"])))
    add("join_sampling_session.json", lambda: dump(types.JoinSamplingSessionRequest(sampling_session_id="samp-1")))
    add("copy_weights.json", lambda: dump(types.CopyWeightsRequest(source_path="tinker://run-1/weights/step-4",
                                                                   destination_project_id="alice", ttl_seconds=3600)))
    add("sessions_search.json", lambda: dump(types.SessionSearchRequest(
        display_name="nightly", statuses=[types.ActiveSessionStatusQuery()], limit=10)))

    fb = getattr(types, "ForwardBackwardRequest")
    if hasattr(fb, "model_fields"):  # releases that send forward_backward as JSON
        add("forward_backward.json", lambda: dump(fb(forward_backward_input=fwdbwd_input(), model_id="run-1", seq_id=1)))
        add("forward.json", lambda: dump(types.ForwardRequest(forward_input=fwdbwd_input(), model_id="run-1", seq_id=2)))
    else:
        from tinker.proto.request_conv import forward_backward_request_to_proto

        def proto(inp, seq, forward_only):
            msg = forward_backward_request_to_proto(fb(forward_backward_input=inp, model_id="run-1", seq_id=seq))
            msg.forward_only = forward_only
            return msg.SerializeToString()

        add("forward_backward.pb", lambda: proto(fwdbwd_input(), 1, False))
        add("forward_backward_ppo.pb", lambda: proto(rl_input(), 2, False))
        add("forward.pb", lambda: proto(fwdbwd_input(), 3, True))
    return out


def write():
    d = os.path.join(HERE, "requests", "sdk-" + version("tinker"))
    os.makedirs(d, exist_ok=True)
    for name, body in requests():
        with open(os.path.join(d, name), "wb") as f:
            f.write(body)
        print(f"  wrote {os.path.relpath(os.path.join(d, name), HERE)} ({len(body)} bytes)", file=sys.stderr)


# The SDK type each reply is read into (by the golden's name), as its resources cast it.
REPLIES = {
    "client_config": "ClientConfigResponse",
    "client_dynamic_config": "ClientDynamicConfigResponse",
    "healthz": "HealthResponse",
    "get_server_capabilities": "GetServerCapabilitiesResponse",
    "create_session": "CreateSessionResponse",
    "session_heartbeat": "SessionHeartbeatResponse",
    "create_sampling_session": "CreateSamplingSessionResponse",
    "get_sampler": "GetSamplerResponse",
    "untyped_future": "UntypedAPIFuture",
    "asample_future": "UntypedAPIFuture",
    "create_model_result": "CreateModelResponse",
    "get_info": "GetInfoResponse",
    "unload_model_result": "UnloadModelResponse",
    "weights_info": "WeightsInfoResponse",
    "optim_step_result": "OptimStepResponse",
    "save_weights_result": "SaveWeightsResponse",
    "save_weights_for_sampler_result": "SaveWeightsForSamplerResponse",
    "load_weights_result": "LoadWeightsResponse",
    "forward_backward_result": "ForwardBackwardOutput",
    "sample_result": "SampleResponse",
    "sample_outputs": "SampleResponse",
    "sample_outputs_dense": "SampleResponse",
    "try_again": "TryAgainResponse",
    "request_failed": "RequestFailedResponse",
    "telemetry": "TelemetryResponse",
    "training_runs": "TrainingRunsResponse",
    "training_run": "TrainingRun",
    "checkpoints": "CheckpointsListResponse",
    "archive_url": "CheckpointArchiveUrlResponse",
    "list_sessions": "ListSessionsResponse",
    "get_session": "GetSessionResponse",
    "get_info_dimuon": "GetInfoResponse",
    "save_weights_external_result": "SaveWeightsExternalResponseInternal",
    "external_weights_urls": "ExternalWeightsUrlsResponse",
    "retrieve_futures": "FuturesRetrieveResponse",
    "join_sampling_session": "JoinSamplingSessionResponse",
    "copy_weights": "CopyWeightsResponse",
    "sessions_search": "SessionSearchResponse",
    "checkpoint_storage_usage": "CurrentCheckpointStorageUsageResponse",
    "apikey_me": "SelfApiKeyResponse",
    "billing_usage_events": "BillingUsageResponse",
}


def sdk_type(name):
    """The SDK class name, or None where this release has none."""
    import importlib
    import re

    tp = getattr(types, name, None)
    if tp is not None:
        return tp
    if name == "SelfApiKeyResponse":  # the CLI's (tinker auth login), not a types one
        try:
            from tinker.cli.auth_api import SelfApiKeyResponse
            return SelfApiKeyResponse
        except ImportError:
            return None
    module = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower().replace("a_p_i", "api")
    try:
        return getattr(importlib.import_module("tinker.types." + module), name, None)
    except ImportError:
        return None


def check():
    """Reads every response golden as this release reads that reply. A reply the release
    has no type for, or reads in the other format (protobuf against JSON), is listed as not
    applicable; run the check with the releases of both formats (0.38.0 and 0.18.x)."""
    import pydantic

    try:
        from tinker.proto.response_conv import PROTO_SUPPORTED_TYPES, deserialize_proto_response
    except ImportError:  # releases that read every reply as JSON
        PROTO_SUPPORTED_TYPES, deserialize_proto_response = set(), None
    d = os.path.join(HERE, "responses")
    failed = 0
    for name in sorted(os.listdir(d)):
        base, ext = os.path.splitext(name)
        tname = REPLIES.get(base)
        if tname is None:
            failed += 1
            print(f"  {name}: no SDK type known for this reply: add it to REPLIES", file=sys.stderr)
            continue
        tp = sdk_type(tname)
        raw = open(os.path.join(d, name), "rb").read()
        try:
            if tp is None:
                print(f"  {name}: n/a (tinker {version('tinker')} has no {tname})", file=sys.stderr)
                continue
            if ext == ".pb":
                if tp not in PROTO_SUPPORTED_TYPES:
                    print(f"  {name}: n/a (tinker {version('tinker')} reads it as JSON)", file=sys.stderr)
                    continue
                read = deserialize_proto_response(raw, tp)
                if base in VALUES and hasattr(read, "prompt_alt_tokens"):
                    VALUES[base](read)
                    print(f"  {name}: values as the Go golden wrote them", file=sys.stderr)
            elif inspect_pydantic(tp, pydantic):
                tp.model_validate(json.loads(raw))
            else:
                print(f"  {name}: n/a (tinker {version('tinker')} reads it as protobuf)", file=sys.stderr)
                continue
            print(f"  {name}: read by tinker {version('tinker')} as {tname}", file=sys.stderr)
        except Exception as e:  # noqa: BLE001 - each failure is reported by name
            failed += 1
            print(f"  {name}: NOT READ by tinker {version('tinker')}: {type(e).__name__}: {e}", file=sys.stderr)
    if failed:
        sys.exit(f"{failed} response golden(s) tinker {version('tinker')} does not read")


def check_sample_outputs(r, sparse=True):
    """The values of golden_test.go's sample_outputs, as the SDK reads them."""
    top = r.sequences[0].topk_logprobs
    assert top == [[(5, -0.5), (1, -1.25)], [(2, -0.25), (6, -0.75)]], top
    t = r.target_prompt_logprobs
    assert t.dtype == "float32" and list(t.shape) == [2, 3], t
    if sparse:
        assert list(t.sparse_crow_indices) == [0, 1, 3] and list(t.sparse_col_indices) == [0, 0, 2], t
        assert [float(x) for x in t.data] == [-2.5, -3.0, -0.5], t
    else:
        assert t.sparse_crow_indices is None, t
        assert [float(x) for x in t.data] == [-2.5, 0, 0, -3.0, 0, -0.5], t
    a = r.prompt_alt_tokens
    assert a.tokens.dtype == "int64" and list(a.tokens.shape) == [2, 2] and [int(x) for x in a.tokens.data] == [4, 9, 3, 3], a
    assert a.logprobs.dtype == "float32" and [float(x) for x in a.logprobs.data] == [-1.5, -2.0, -0.25, -0.25], a


VALUES = {
    "sample_outputs": check_sample_outputs,
    "sample_outputs_dense": lambda r: check_sample_outputs(r, sparse=False),
}


def inspect_pydantic(tp, pydantic):
    import inspect

    return inspect.isclass(tp) and issubclass(tp, pydantic.BaseModel)


if __name__ == "__main__":
    {"write": write, "check": check}[sys.argv[1] if len(sys.argv) > 1 else "write"]()
