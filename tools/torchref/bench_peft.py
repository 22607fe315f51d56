#!/usr/bin/env python3
"""PyTorch + PEFT reference on a GPU for `tuft-bench engine --device cuda`.

It loads the same model directory (config.json, model.safetensors as `tuft model init`
writes them) with transformers' AutoModelForCausalLM, base weights in bfloat16 with SDPA
attention, adds a PEFT LoRA adapter (r=--rank, lora_alpha=rank, no dropout) on q, k, v, o,
gate, up and down (PEFT keeps adapter weights in float32, as the Go engine does), and
measures on the GPU, in eager mode:

  train   one step = forward + backward of cross-entropy (summed) over one datum of --tokens
          tokens + torch.optim.AdamW on the LoRA parameters; one warm-up step, then the
          median of --steps steps (torch.cuda.synchronize around each)
  sample  HF generate: --sample-tokens new tokens (min_new_tokens = max_new_tokens, so no
          stop at EOS) after a --prompt-tokens prompt, temperature 1, top_k 0, top_p 1, KV
          cache, num_return_sequences = each --batch; prefill included in the time
  memory  torch.cuda.max_memory_allocated, and this process's peak RSS

and prints one JSON object on stdout (progress on stderr), in the shape bench.py prints. The
token ids follow cmd/tuft-bench/bench.go, so the warm-up loss (B = 0: the base model's) must agree
with the Go figure to bfloat16 precision.

Needs torch with CUDA, transformers and peft:
    python3 tools/torchref/bench_peft.py --model DIR --device cuda:0 [--tokens 512] [--batch 1 16 64]
"""
import argparse
import json
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]



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


def bench_tokens(n, vocab, salt):
    """The same deterministic token ids as cmd/tuft-bench/bench.go."""
    return [(i * 7919 + salt) % vocab for i in range(n)]


def sync(dev):
    torch.cuda.synchronize(dev)


def train(model, vocab, args, dev):
    toks = bench_tokens(args.tokens + 1, vocab, 13)
    x = torch.tensor([toks[:-1]], device=dev)
    y = torch.tensor(toks[1:], device=dev)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    times, first_loss = [], None
    model.train()
    for step in range(args.steps + 1):
        sync(dev)
        t0 = time.perf_counter()
        logits = model(input_ids=x).logits[0].float()
        loss = F.cross_entropy(logits, y, reduction="sum")
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(dev)
        dt = time.perf_counter() - t0
        if step == 0:
            first_loss = loss.item() / args.tokens
            log(f"train warm-up step {dt:.3f}s, loss/token {first_loss:.6f}")
        else:
            times.append(dt)
            log(f"train step {step}/{args.steps} {dt:.3f}s")
    med = statistics.median(times)
    return {"tokens": args.tokens, "steps": args.steps, "step_s": times, "median_s": med,
            "tokens_per_s": args.tokens / med, "first_loss": first_loss}


@torch.no_grad()
def sample(model, vocab, args, batch, dev):
    model.eval()
    prompt = torch.tensor([bench_tokens(args.prompt_tokens, vocab, 101)], device=dev)
    gen = dict(do_sample=True, temperature=args.temperature, top_k=0, top_p=1.0, pad_token_id=0, use_cache=True)
    # One short untimed call: generate's first use builds its caches and logits processors.
    model.generate(input_ids=prompt, max_new_tokens=2, min_new_tokens=2, num_return_sequences=batch, **gen)
    torch.manual_seed(args.seed)
    sync(dev)
    t0 = time.perf_counter()
    out = model.generate(input_ids=prompt, max_new_tokens=args.sample_tokens, min_new_tokens=args.sample_tokens,
                         num_return_sequences=batch, **gen)
    sync(dev)
    dt = time.perf_counter() - t0
    n = batch * (out.shape[1] - prompt.shape[1])
    log(f"sample batch {batch}: {n} tokens in {dt:.3f}s")
    return {"batch": batch, "output_tokens": n, "seconds": dt, "tokens_per_s": n / dt}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="model directory (HuggingFace layout)")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=0, help="0 means rank (scale 1)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--sample-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 16, 64])
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="ignored (CPU threads of the CPU reference)")
    args = ap.parse_args()

    import peft
    import transformers
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    dev = torch.device(args.device)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.bfloat16, attn_implementation="sdpa").to(dev)
    cfg = LoraConfig(r=args.rank, lora_alpha=args.alpha or args.rank, lora_dropout=0.0, bias="none",
                     target_modules=TARGETS, task_type="CAUSAL_LM")
    model = get_peft_model(model, cfg)
    sync(dev)
    load_s = time.perf_counter() - t0
    vocab = model.config.vocab_size
    log(f"loaded {args.model} on {torch.cuda.get_device_name(dev)} in {load_s:.2f}s; "
        f"adapter dtype {next(p for p in model.parameters() if p.requires_grad).dtype}")
    res = {"impl": "pytorch+peft", "torch_version": torch.__version__, "transformers_version": transformers.__version__,
           "peft_version": peft.__version__, "python": sys.version.split()[0], "threads": torch.get_num_threads(),
           "device": f"{args.device} ({torch.cuda.get_device_name(dev)})", "load_s": load_s}
    torch.cuda.reset_peak_memory_stats(dev)
    res["train"] = train(model, vocab, args, dev)
    res["sample"] = [sample(model, vocab, args, b, dev) for b in args.batch]
    res["device_peak_mib"] = torch.cuda.max_memory_allocated(dev) / (1 << 20)
    res["peak_rss_mib"] = peak_rss_mib()
    print(json.dumps(res))


if __name__ == "__main__":
    main()
