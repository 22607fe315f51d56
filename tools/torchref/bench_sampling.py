#!/usr/bin/env python3
"""PyTorch reference for `tuft-bench sampling`.

The same float32 decoder as bench.py (built from the same model directory), with --adapters
LoRA adapters (rank --rank on q, k, v, o, gate, up, down, B non-zero), measuring on the CPU
with --threads threads, under torch.no_grad with a hand-written KV cache, temperature 1:

  single   one prompt, --requests samples: the prompt prefilled once with adapter 0 and its
           cache copied per sample, then every step decodes all samples together;
  batched  --requests different prompts, prompt i with adapter i mod --adapters, prefilled as
           one batch and decoded together, each row with its own adapter (the LoRA term per
           adapter on its rows, the base weights once for all): what a continuous-batching
           server does with that many concurrent one-sample requests.

Prefill is included in both times. It also reports which BLAS torch runs on and its GEMM
speed (blas.py). One JSON object on stdout, progress on stderr.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import blas  # noqa: E402


class MultiLoRA(bench.Model):
    """bench.Model whose rows may each use another adapter."""

    def __init__(self, d, rank, adapters, seed):
        super().__init__(d, rank, rank, seed)
        g = torch.Generator().manual_seed(seed + 1)
        self.adapters = []
        for _ in range(adapters):
            layers = []
            for layer in self.lora:
                ab = {}
                for p, (A, B) in layer.items():
                    ab[p] = (A.detach().clone(), (torch.randn(B.shape, generator=g) * 0.01))
                layers.append(ab)
            self.adapters.append(layers)
        self.rows = None  # per adapter: the batch rows that use it

    def use(self, rows):
        self.rows = rows

    def linear(self, x, l, p, mod):
        pre = f"model.layers.{l}.{mod}.{p}."
        b = self.w[pre + "bias"] if self.bias and p in ("q_proj", "k_proj", "v_proj") else None
        y = F.linear(x, self.w[pre + "weight"], b)
        for a, idx in enumerate(self.rows):
            if idx is None:
                continue
            A, B = self.adapters[a][l][p]
            xs = x.index_select(0, idx)
            y.index_add_(0, idx, self.scale * F.linear(F.linear(xs, A), B))
        return y


@torch.no_grad()
def run(m, prompts, rows, samples, sample_tokens, seed):
    """Prefills prompts [P, T] (rows: adapter of each), copies the cache to `samples` rows
    when P is 1, then samples sample_tokens tokens per row. Returns (tokens, seconds)."""
    g = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    n = prompts.shape[0]
    cache = bench.KVCache(m.L, n, m.KV, prompts.shape[1] + sample_tokens, m.hd)
    m.use(rows(n))
    last = m.logits(m.forward(prompts, cache)[:, -1])
    if samples > n:
        cache = cache.repeat(samples)
        last = last.expand(samples, -1)
        m.use(rows(samples))
    out = 0
    for step in range(sample_tokens):
        tok = torch.multinomial(torch.softmax(last, -1), 1, generator=g)
        out += tok.shape[0]
        if step + 1 == sample_tokens:
            break
        last = m.logits(m.forward(tok, cache)[:, -1])
    return out, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--adapters", type=int, default=4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--sample-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    threads = args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    info = blas.blas_info(threads)
    bench.log(f"BLAS {info['kind']} ({info['library']}): GEMM 1024^3 {info['gemm_gflops']:.1f} GFLOP/s")
    m = MultiLoRA(args.model, args.rank, args.adapters, args.seed)
    n, M = args.requests, args.adapters

    def one_adapter(k):
        return [torch.arange(k)] + [None] * (M - 1)

    def per_row(k):
        return [torch.arange(a, k, M) if a < k else None for a in range(M)]

    prompt = torch.tensor([bench.bench_tokens(args.prompt_tokens, m.V, 101)])
    run(m, prompt, one_adapter, 2, 2, args.seed)  # warm-up
    toks, secs = run(m, prompt, one_adapter, n, args.sample_tokens, args.seed)
    single = {"batch": n, "output_tokens": toks, "seconds": secs, "tokens_per_s": toks / secs}
    bench.log(f"one request of {n} samples: {toks} tokens in {secs:.2f}s")
    prompts = torch.tensor([bench.bench_tokens(args.prompt_tokens, m.V, 101 + 7 * i) for i in range(n)])
    toks, secs = run(m, prompts, per_row, n, args.sample_tokens, args.seed)
    batched = {"batch": n, "output_tokens": toks, "seconds": secs, "tokens_per_s": toks / secs}
    bench.log(f"{n} prompts over {M} adapters, batched: {toks} tokens in {secs:.2f}s")
    print(json.dumps({"torch_version": torch.__version__, "threads": torch.get_num_threads(), "blas": info,
                      "single_request": single, "batched_multi_lora": batched}))


if __name__ == "__main__":
    main()
