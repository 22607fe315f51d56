"""Focused reproduction of the 45-second result-poll stall seen while running recipes.

Root cause (client side, triggered by a kept-alive connection): the Tinker SDK fetches
POST /api/v1/client/config through a one-off httpx client that it never closes. When
Python's cyclic garbage collector frees that client on a thread that runs an event loop
(a recipe's asyncio.run), the socket finalizer releases the file descriptor at once and the
client's __del__ schedules aclose() on that loop. The SDK's own loop then opens a new
connection, which gets the same descriptor number; the stale aclose() unregisters that
number from the SDK loop's selector, and the new connection's reply, already in the
socket, is never read until the SDK's 45 s timeout. The server's fix (api/conn.go) closes
the connection after the client/config reply, so the forgotten client holds no socket.

Each round runs in a fresh process: create a training client from inside a running
asyncio loop (as the cookbook does), collect garbage there (what the automatic collector
does at a random moment), submit one heavy step and a few light ones, let the SDK open its
poll connections, then yield so the scheduled aclose() runs while those polls wait. A
round that takes longer than --stall-seconds stalled.

Usage: TINKER_BASE_URL=... TINKER_API_KEY=... python stall_repro.py --model NAME [--rounds N]
Exit status 1 when any round stalled.
"""

import argparse
import asyncio
import gc
import os
import random
import subprocess
import sys
import time


def _datum(types, n):
    toks = [random.randrange(0, 256) for _ in range(n)]
    return types.Datum(
        model_input=types.ModelInput.from_ints(toks[:-1]),
        loss_fn_inputs={"target_tokens": toks[1:], "weights": [1.0] * (n - 1)},
    )


async def _one_round(model: str) -> float:
    import tinker
    from tinker import types

    sc = tinker.ServiceClient()
    tc = await sc.create_lora_training_client(base_model=model, rank=4)
    gc.collect()  # frees the SDK's one-off client-config client on this (running) loop's thread
    t0 = time.monotonic()
    futs = [
        tc.forward_backward([_datum(types, 256) for _ in range(8)], "cross_entropy"),
        tc.optim_step(types.AdamParams(learning_rate=1e-3)),
    ]
    for _ in range(2):
        futs.append(tc.forward_backward([_datum(types, 32) for _ in range(4)], "cross_entropy"))
        futs.append(tc.optim_step(types.AdamParams(learning_rate=1e-3)))
    time.sleep(0.3)  # the SDK thread opens and registers its poll connections meanwhile
    await asyncio.sleep(0.1)  # the scheduled aclose() of the collected client runs now
    for f in futs:
        await f
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--stall-seconds", type=float, default=30.0)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(f"{asyncio.run(_one_round(a.model)):.2f}")
        return 0
    stalled = 0
    for i in range(a.rounds):
        t0 = time.monotonic()
        p = subprocess.run(
            [sys.executable, __file__, "--one", "--model", a.model],
            capture_output=True, text=True, timeout=180, env=os.environ,
        )
        wall = time.monotonic() - t0
        if p.returncode != 0:
            print(p.stdout[-2000:], p.stderr[-4000:], file=sys.stderr)
            raise SystemExit(f"round {i} failed with exit status {p.returncode}")
        took = float(p.stdout.strip().splitlines()[-1])
        bad = took > a.stall_seconds
        stalled += bad
        print(f"round {i}: steps took {took:.1f} s (process {wall:.1f} s){'  STALLED' if bad else ''}", flush=True)
    print(f"stall_repro: {stalled} of {a.rounds} rounds stalled (> {a.stall_seconds:g} s)")
    return 1 if stalled else 0


if __name__ == "__main__":
    sys.exit(main())
