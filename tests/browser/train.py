"""Tenant A's records for the browser suite, made by the official Tinker SDK (0.38.0):

1. a run and a session whose names are HTML (`<img src=x onerror=alert(1)>`), one step, so
   the suite can check that no page executes a user-supplied string;
2. the run whose loss curve the suite watches grow: STEPS forward_backward + optim_step
   steps, each started only when the suite writes a line on stdin ("next"), so the suite
   sees every step land in the open page without reloading it; then a saved state and
   a sampler checkpoint (for the publish, download and playground scenarios).

Each fact is one JSON line on stdout; the suite (console_test.go) reads them.
Environment: TINKER_BASE_URL, TINKER_API_KEY, TUFT_MODEL, TUFT_STEPS.
"""

import json
import os
import sys

import tinker
from tinker import types

BASE_URL = os.environ["TINKER_BASE_URL"]
KEY = os.environ["TINKER_API_KEY"]
MODEL = os.environ.get("TUFT_MODEL", "tuft/tiny")
STEPS = int(os.environ.get("TUFT_STEPS", "12"))
XSS = "<img src=x onerror=alert(1)>"
ADAM = types.AdamParams(learning_rate=5e-3, beta1=0.9, beta2=0.95, eps=1e-8)


def emit(**fact):
    print(json.dumps(fact), flush=True)


def batch(n=2, length=16):
    """Sequences that count upwards: next-token prediction the tiny model learns fast."""
    data = []
    for i in range(n):
        seq = [(17 * i + j) % 300 + 10 for j in range(length + 1)]
        data.append(types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]),
                                loss_fn_inputs={"target_tokens": seq[1:], "weights": [1.0] * length}))
    return data


def step(tc, data):
    fb = tc.forward_backward(data, "cross_entropy")
    opt = tc.optim_step(ADAM)
    loss = fb.result().metrics["loss:sum"]
    opt.result()
    return loss


def main():
    data = batch()

    hostile = tinker.ServiceClient(base_url=BASE_URL, api_key=KEY,
                                   user_metadata={"name": "<b>session</b>" + XSS})
    xtc = hostile.create_lora_training_client(base_model=MODEL, rank=4, seed=3, user_metadata={"name": XSS})
    step(xtc, data)
    emit(event="xss", run_id=xtc.model_id, session_id=hostile.holder.get_session_id())

    sc = tinker.ServiceClient(base_url=BASE_URL, api_key=KEY, user_metadata={"name": "browser-suite"})
    tc = sc.create_lora_training_client(base_model=MODEL, rank=8, seed=1, user_metadata={"name": "curve-run"})
    emit(event="run", run_id=tc.model_id, session_id=sc.holder.get_session_id())
    for i in range(STEPS):
        if sys.stdin.readline().strip() != "next":
            raise SystemExit("the suite closed stdin before step %d" % i)
        emit(event="step", step=i + 1, loss=step(tc, data))
    state = tc.save_state("browser-state").result().path
    sampler = tc.save_weights_for_sampler("browser-sampler").result().path
    emit(event="saved", state=state, sampler=sampler)


if __name__ == "__main__":
    main()
