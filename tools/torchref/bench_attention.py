#!/usr/bin/env python3
"""PyTorch reference for engine/cuda's BenchmarkAttention (scripts/gpu-check.sh).

Times torch.nn.functional.scaled_dot_product_attention, causal, bfloat16 on the GPU, on
the shapes the Go benchmark uses (one sequence of T tokens; heads, KV heads, head_dim):
the forward pass alone and forward + backward, with CUDA events after warm-up. It also
checks, on a small causal GQA case, that SDPA in bfloat16 agrees with a float64 reference
within the tolerance engine/device/devicetest states for bfloat16 attention (2e-2
relative, in norm) — the figure the Go kernels are held to on the emulation.

Runs offline (torch only). One JSON object on stdout.
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

SHAPES = [("smollm2-T2048", 2048, 9, 3, 64), ("llama7b-T2048", 2048, 32, 32, 128)]


def sdpa(q, k, v):
    """Causal attention with GQA: K/V heads repeated to the query heads."""
    g = q.shape[1] // k.shape[1]
    if g > 1:
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def time_ms(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def check(dev):
    """Relative errors of bfloat16 SDPA against float64, forward and gradients."""
    torch.manual_seed(0)
    t, h, kvh, hd = 131, 6, 2, 64
    q64, k64, v64 = (torch.randn(1, n, t, hd, dtype=torch.float64, device=dev) for n in (h, kvh, kvh))
    dout = torch.randn(1, h, t, hd, dtype=torch.float64, device=dev)
    out = {}
    for name, dt in (("ref", torch.float64), ("bf16", torch.bfloat16)):
        # A fresh leaf per precision: .to() of a float64 tensor to float64 is the tensor itself,
        # which would make the bfloat16 copies non-leaves (no .grad).
        q, k, v = (x.detach().to(dt).clone().requires_grad_() for x in (q64, k64, v64))
        o = sdpa(q, k, v)
        o.backward(dout.to(dt))
        out[name] = (o, q.grad, k.grad, v.grad)
    return {n: rel(a, b) for n, a, b in zip(("out", "dq", "dk", "dv"), out["bf16"], out["ref"])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device for torch"}))
        return 1
    dev = "cuda"
    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "check": check(dev), "shapes": []}
    for name, t, h, kvh, hd in SHAPES:
        q = torch.randn(1, h, t, hd, dtype=torch.bfloat16, device=dev, requires_grad=True)
        k = torch.randn(1, kvh, t, hd, dtype=torch.bfloat16, device=dev, requires_grad=True)
        v = torch.randn(1, kvh, t, hd, dtype=torch.bfloat16, device=dev, requires_grad=True)
        dout = torch.randn(1, h, t, hd, dtype=torch.bfloat16, device=dev)
        flops = 2.0 * t * t * h * hd  # the causal half of 4·T²·heads·hd, as the Go benchmark counts

        def fwd():
            with torch.no_grad():
                sdpa(q, k, v)

        def fwdbwd():
            o = sdpa(q, k, v)
            o.backward(dout)

        f_ms, fb_ms = time_ms(fwd, args.iters), time_ms(fwdbwd, args.iters)
        res["shapes"].append({"name": name, "fwd_ms": f_ms, "fwd_bwd_ms": fb_ms,
                              "fwd_tflops": flops / f_ms / 1e9, "fwd_bwd_tflops": 3.5 * flops / fb_ms / 1e9})
    print(json.dumps(res, indent=1))
    bad = {k: v for k, v in res["check"].items() if not v < 2e-2}
    if bad:
        print(f"bench_attention: bfloat16 SDPA outside 2e-2 of float64: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
