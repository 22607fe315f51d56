#!/usr/bin/env python3
"""PyTorch performance reference for `tuft-bench engine`.

It builds the same model as the Go engine from a HuggingFace-layout directory (config.json and
model.safetensors as `tuft model init` writes them: F32, BF16 or F16), in float32: a Llama/Qwen2
decoder (RMSNorm, RoPE with rope_theta, GQA, SwiGLU, tied embeddings, Qwen2 q/k/v bias) with LoRA
(A: rank x in, B: out x rank, scale alpha/rank) on q, k, v, o, gate, up and down; the base weights
are frozen. It then measures, on the CPU with --threads threads:

  train   one step = forward + backward of cross-entropy (summed) over one datum of --tokens
          tokens + torch.optim.AdamW on the LoRA parameters only; one warm-up step, then the
          median of --steps steps
  sample  --sample-tokens new tokens after a --prompt-tokens prompt, temperature 1, fixed seed,
          with a KV cache, at batch 1 and batch 16 (the prompt is prefilled once and its cache
          copied 16 times, as the Go sampler does); prefill is included in the time
  memory  peak RSS of this process (its own VmHWM; ru_maxrss where there is none), import of torch included
  blas    which BLAS torch multiplies with and its GEMM GFLOP/s (blas.py): `tuft-bench`
          refuses a ratio against Debian's unoptimised reference BLAS

and prints one JSON object on stdout (progress goes to stderr). With --paced it first prints
{"ready": true}, then waits for a "step" line on stdin before each training step (printing
{"step": i, "seconds": t} after it; each step after the warm-up is preceded by an untimed one,
which warms the caches the caller's step used) and for a "sample" line before sampling:
tuft-bench then alternates the two sides' steps. The token ids are the same
formula as the Go side's, so the warm-up step's loss must agree with Go's to float32 precision.

Usage (Debian's python3-torch and python3-numpy; nothing else):
    /usr/bin/python3 tools/torchref/bench.py --model DIR [--tokens 512] [--rank 16] [--steps 3]
"""
import argparse
import json
import math
import os
import resource
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import blas  # noqa: E402

PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]



def peak_rss_mib():
    """This process's own peak RSS: VmHWM, which exec resets. ru_maxrss is not used where
    VmHWM exists because Linux carries a parent's high-water mark into a child across fork
    and exec, so the reference would report the Go process's peak as its own."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def log(*a):
    print("torchref:", *a, file=sys.stderr, flush=True)


def read_safetensors(path):
    """Reads a safetensors file into float32 tensors (8-byte LE header length, JSON header, data)."""
    out = {}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        for name, e in header.items():
            if name == "__metadata__":
                continue
            a, b = e["data_offsets"]
            f.seek(base + a)
            raw = f.read(b - a)
            if e["dtype"] == "F32":
                arr = np.frombuffer(raw, dtype="<f4").copy()
            elif e["dtype"] == "BF16":
                arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            elif e["dtype"] == "F16":
                arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
            else:
                raise ValueError(f"{path}: {name}: dtype {e['dtype']}")
            del raw
            out[name] = torch.from_numpy(arr.reshape(e["shape"]))
    return out


def weight_files(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        return sorted({os.path.join(d, f) for f in json.load(open(idx))["weight_map"].values()})
    return [os.path.join(d, "model.safetensors")]


class KVCache:
    """Per-layer keys and values, [batch, kv_heads, capacity, head_dim], filled in order."""

    def __init__(self, layers, batch, kv_heads, capacity, head_dim):
        self.k = [torch.empty(batch, kv_heads, capacity, head_dim) for _ in range(layers)]
        self.v = [torch.empty(batch, kv_heads, capacity, head_dim) for _ in range(layers)]
        self.n = 0

    def repeat(self, batch):
        """A cache for `batch` copies of this (batch 1) cache's sequence."""
        out = KVCache.__new__(KVCache)
        out.k = [k.expand(batch, -1, -1, -1).clone() for k in self.k]
        out.v = [v.expand(batch, -1, -1, -1).clone() for v in self.v]
        out.n = self.n
        return out


class Model:
    def __init__(self, d, rank, alpha, seed):
        c = json.load(open(os.path.join(d, "config.json")))
        self.cfg = c
        w = {}
        for f in weight_files(d):
            w.update(read_safetensors(f))
        self.w = w
        self.L, self.H = c["num_hidden_layers"], c["num_attention_heads"]
        self.KV = c.get("num_key_value_heads") or self.H
        self.D, self.I, self.V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
        self.hd = c.get("head_dim") or self.D // self.H
        self.eps = c["rms_norm_eps"]
        self.bias = c["model_type"] == "qwen2" or c.get("attention_bias", False)
        self.embed = w["model.embed_tokens.weight"]
        self.lm = w["model.embed_tokens.weight"] if c.get("tie_word_embeddings", False) else w["lm_head.weight"]
        self.theta = c.get("rope_theta", 10000.0)
        self.rope_table(64)
        # LoRA as PEFT initialises it: A ~ U(-1/sqrt(in), 1/sqrt(in)), B = 0.
        self.scale = alpha / rank
        q, kv = self.H * self.hd, self.KV * self.hd
        dims = {"q_proj": (self.D, q), "k_proj": (self.D, kv), "v_proj": (self.D, kv), "o_proj": (q, self.D),
                "gate_proj": (self.D, self.I), "up_proj": (self.D, self.I), "down_proj": (self.I, self.D)}
        g = torch.Generator().manual_seed(seed)
        self.lora = []
        for _ in range(self.L):
            layer = {}
            for p in PROJ:
                i, o = dims[p]
                bound = 1 / math.sqrt(i)
                A = ((torch.rand(rank, i, generator=g) * 2 - 1) * bound).requires_grad_(True)
                B = torch.zeros(o, rank).requires_grad_(True)
                layer[p] = (A, B)
            self.lora.append(layer)

    def params(self):
        return [t for layer in self.lora for ab in layer.values() for t in ab]

    def rope_table(self, n):
        inv = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd))
        ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos = torch.cat([ang.cos()] * 2, -1).float()
        self.sin = torch.cat([ang.sin()] * 2, -1).float()

    def rope(self, x, pos0):
        # x: [B, heads, T, hd]
        T = x.shape[2]
        if pos0 + T > self.cos.shape[0]:
            self.rope_table(max(2 * self.cos.shape[0], pos0 + T))
        cos, sin = self.cos[pos0:pos0 + T], self.sin[pos0:pos0 + T]
        h = self.hd // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos + rot * sin

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def linear(self, x, l, p, mod):
        pre = f"model.layers.{l}.{mod}.{p}."
        b = self.w[pre + "bias"] if self.bias and p in ("q_proj", "k_proj", "v_proj") else None
        y = F.linear(x, self.w[pre + "weight"], b)
        A, B = self.lora[l][p]
        return y + self.scale * F.linear(F.linear(x, A), B)

    def forward(self, tokens, cache=None):
        """tokens: [B, T] int64. With a cache, the tokens continue the cached sequences (and
        are appended to the cache). Returns the final hidden states [B, T, D]."""
        Bn, T = tokens.shape
        pos0 = cache.n if cache is not None else 0
        S = pos0 + T
        rep = self.H // self.KV
        x = self.embed[tokens]
        mask = None
        if T > 1:
            mask = torch.full((T, S), float("-inf")).triu(pos0 + 1)
        for l in range(self.L):
            pre = f"model.layers.{l}."
            h = self.rms(x, self.w[pre + "input_layernorm.weight"])
            q = self.linear(h, l, "q_proj", "self_attn").view(Bn, T, self.H, self.hd).transpose(1, 2)
            k = self.linear(h, l, "k_proj", "self_attn").view(Bn, T, self.KV, self.hd).transpose(1, 2)
            v = self.linear(h, l, "v_proj", "self_attn").view(Bn, T, self.KV, self.hd).transpose(1, 2)
            q, k = self.rope(q, pos0), self.rope(k, pos0)
            if cache is not None:
                cache.k[l][:, :, pos0:S] = k
                cache.v[l][:, :, pos0:S] = v
                k, v = cache.k[l][:, :, :S], cache.v[l][:, :, :S]
            # GQA without copying keys: query head h uses kv head h // rep.
            qg = q.reshape(Bn, self.KV, rep, T, self.hd)
            s = (qg @ k.unsqueeze(2).transpose(-1, -2)) / math.sqrt(self.hd)  # [B, KV, rep, T, S]
            if mask is not None:
                s = s + mask
            o = torch.softmax(s, -1) @ v.unsqueeze(2)  # [B, KV, rep, T, hd]
            o = o.reshape(Bn, self.H, T, self.hd).transpose(1, 2).reshape(Bn, T, self.H * self.hd)
            x = x + self.linear(o, l, "o_proj", "self_attn")
            h = self.rms(x, self.w[pre + "post_attention_layernorm.weight"])
            g = self.linear(h, l, "gate_proj", "mlp")
            u = self.linear(h, l, "up_proj", "mlp")
            x = x + self.linear(F.silu(g) * u, l, "down_proj", "mlp")
        if cache is not None:
            cache.n = S
        return self.rms(x, self.w["model.norm.weight"])

    def logits(self, h):
        return F.linear(h, self.lm)


def bench_tokens(n, vocab, salt):
    """The same deterministic token ids as cmd/tuft-bench/bench.go."""
    return [(i * 7919 + salt) % vocab for i in range(n)]


def paced_turn(args, what):
    """With --paced, waits for the caller's line on stdin before each training step and
    before sampling, so the caller can alternate its own steps with these (tuft-bench runs
    the two sides' steps in turn, and a burst of noise on a shared machine lands on both)."""
    if not args.paced:
        return
    line = sys.stdin.readline().strip()
    if line != what:
        raise SystemExit(f"torchref: --paced: expected {what!r} on stdin, got {line!r}")


def paced_say(args, obj):
    """With --paced, reports a step's figure on stdout at once (one JSON object a line)."""
    if args.paced:
        print(json.dumps(obj), flush=True)


def train(m, args):
    toks = bench_tokens(args.tokens + 1, m.V, 13)
    x = torch.tensor([toks[:-1]])
    y = torch.tensor(toks[1:])
    opt = torch.optim.AdamW(m.params(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)

    def one_step():
        h = m.forward(x)
        loss = F.cross_entropy(m.logits(h)[0], y, reduction="sum")
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    times, first_loss = [], None
    for step in range(args.steps + 1):
        paced_turn(args, "step")
        if args.paced and step > 0:
            # The caller's step evicted this one's data from the caches; an untimed step
            # first, so the timed one runs as back-to-back training steps do.
            one_step()
        t0 = time.perf_counter()
        loss = one_step()
        dt = time.perf_counter() - t0
        if step == 0:
            first_loss = loss.item() / args.tokens
            log(f"train warm-up step {dt:.2f}s, loss/token {first_loss:.6f}")
        else:
            times.append(dt)
            log(f"train step {step}/{args.steps} {dt:.2f}s")
        paced_say(args, {"step": step, "seconds": dt})
    med = statistics.median(times)
    return {"tokens": args.tokens, "steps": args.steps, "step_s": times, "median_s": med,
            "tokens_per_s": args.tokens / med, "first_loss": first_loss}


@torch.no_grad()
def sample(m, args, batch):
    prompt = torch.tensor([bench_tokens(args.prompt_tokens, m.V, 101)])
    g = torch.Generator().manual_seed(args.seed)
    t0 = time.perf_counter()
    cache = KVCache(m.L, 1, m.KV, args.prompt_tokens + args.sample_tokens, m.hd)
    h = m.forward(prompt, cache)
    last = m.logits(h[:, -1])  # [1, V]
    if batch > 1:
        cache = cache.repeat(batch)
        last = last.expand(batch, -1)
    out = []
    for step in range(args.sample_tokens):
        lp = torch.log_softmax(last / args.temperature, -1)
        tok = torch.multinomial(lp.exp(), 1, generator=g)  # [B, 1]
        out.append(tok)
        lp.gather(1, tok)
        if step + 1 == args.sample_tokens:
            break
        last = m.logits(m.forward(tok, cache)[:, -1])
    dt = time.perf_counter() - t0
    n = batch * len(out)
    log(f"sample batch {batch}: {n} tokens in {dt:.2f}s")
    return {"batch": batch, "output_tokens": n, "seconds": dt, "tokens_per_s": n / dt}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="model directory (HuggingFace layout)")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=0, help="0 means rank (scale 1)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--sample-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 16])
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="0: the CPUs this process may run on")
    ap.add_argument("--paced", action="store_true",
                    help="print {\"ready\": true} after loading, then run each training step on a "
                         "'step' line from stdin (printing its time) and sample on a 'sample' line")
    args = ap.parse_args()
    threads = args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    torch.set_default_dtype(torch.float32)
    t0 = time.perf_counter()
    m = Model(args.model, args.rank, args.alpha or args.rank, args.seed)
    load_s = time.perf_counter() - t0
    log(f"loaded {args.model} in {load_s:.2f}s")
    res = {"impl": "pytorch", "torch_version": torch.__version__, "python": sys.version.split()[0],
           "threads": torch.get_num_threads(), "load_s": load_s, "blas": blas.blas_info(threads)}
    log(f"BLAS {res['blas']['kind']} ({res['blas']['library']}): GEMM 1024^3 {res['blas']['gemm_gflops']:.1f} GFLOP/s")
    paced_say(args, {"ready": True})
    res["train"] = train(m, args)
    paced_turn(args, "sample")
    res["sample"] = [sample(m, args, b) for b in args.batch]
    res["peak_rss_mib"] = peak_rss_mib()
    print(json.dumps(res))


if __name__ == "__main__":
    main()
