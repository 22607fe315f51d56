#!/usr/bin/env python3
"""PyTorch reference for the TuFT engine: a minimal Llama/Qwen2 decoder with LoRA, the six
Tinker losses TuFT implements and torch.optim.AdamW, run in float64 on a model directory in HuggingFace
layout. It writes fixtures the Go tests compare against (engine/torchref_test.go).

Usage (Debian's python3-torch and python3-numpy; nothing else):
    go run ./cmd/tuft model init --preset tiny --out /tmp/tiny
    /usr/bin/python3 tools/torchref/reference.py /tmp/tiny engine/testdata/torchref

Outputs in OUT_DIR:
    adapter/adapter_config.json, adapter/adapter_model.safetensors  random LoRA (A and B non-zero)
    inputs.json            the datums and loss configs
    expected.safetensors   per loss: "<loss>/logprobs/<i>", "<loss>/grad/<peft name>";
                           "base/logprobs/0"; "adamw/<peft name>" (weights after one step);
                           "dimuon/<peft name>", "dimuon_momentum/<peft name>" (after two
                           Dimuon steps of cross-entropy)
    expected.json          per loss: loss:sum
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

torch.set_num_threads(1)
DT = torch.float64


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        raw = data[a:b]
        if e["dtype"] == "F32":
            arr = np.frombuffer(raw, dtype="<f4")
        elif e["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        else:
            raise ValueError(f"{path}: {name}: dtype {e['dtype']}")
        out[name] = torch.tensor(arr.reshape(e["shape"]), dtype=DT)
    return out


def write_safetensors(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name].detach().to(torch.float32).numpy(), dtype="<f4")
        b = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def peft_name(layer, proj, ab):
    mod = "mlp" if proj in ("gate_proj", "up_proj", "down_proj") else "self_attn"
    return f"base_model.model.model.layers.{layer}.{mod}.{proj}.lora_{ab}.weight"


class Model:
    def __init__(self, d):
        self.cfg = json.load(open(os.path.join(d, "config.json")))
        self.w = read_safetensors(os.path.join(d, "model.safetensors"))
        c = self.cfg
        self.L, self.H, self.KV = c["num_hidden_layers"], c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
        self.D = c["hidden_size"]
        self.hd = c.get("head_dim") or self.D // self.H
        self.eps = c["rms_norm_eps"]
        self.bias = c["model_type"] == "qwen2" or c.get("attention_bias", False)
        self.lm = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])
        inv = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, self.hd, 2, dtype=DT) / self.hd))
        rs = c.get("rope_scaling")
        if rs and (rs.get("rope_type") or rs.get("type")) == "llama3":
            old, lo, hi, fac = rs["original_max_position_embeddings"], rs["low_freq_factor"], rs["high_freq_factor"], rs["factor"]
            wave = 2 * math.pi / inv
            smooth = (old / wave - lo) / (hi - lo)
            scaled = torch.where(wave > old / lo, inv / fac, inv)
            mid = (wave <= old / lo) & (wave >= old / hi)
            inv = torch.where(mid, (1 - smooth) * inv / fac + smooth * inv, scaled)
        self.inv = inv

    def rms(self, x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, n_heads):
        T = x.shape[0]
        ang = torch.arange(T, dtype=DT)[:, None] * self.inv[None, :]
        cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
        x = x.view(T, n_heads, self.hd)
        h = self.hd // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return (x * cos[:, None, :] + rot * sin[:, None, :]).reshape(T, n_heads * self.hd)

    def linear(self, x, wname, lora, key, scale, bias=None):
        y = x @ self.w[wname].T
        if bias is not None:
            y = y + self.w[bias]
        if key in lora:
            A, B = lora[key]
            y = y + scale * (x @ A.T) @ B.T
        return y

    def logits(self, tokens, lora, scale):
        w = self.w
        x = w["model.embed_tokens.weight"][torch.tensor(tokens)]
        T = len(tokens)
        mask = torch.full((T, T), float("-inf"), dtype=DT).triu(1)
        for l in range(self.L):
            p = f"model.layers.{l}."
            h = self.rms(x, w[p + "input_layernorm.weight"])
            b = lambda n: (p + f"self_attn.{n}.bias") if self.bias else None
            q = self.linear(h, p + "self_attn.q_proj.weight", lora, (l, "q_proj"), scale, b("q_proj"))
            k = self.linear(h, p + "self_attn.k_proj.weight", lora, (l, "k_proj"), scale, b("k_proj"))
            v = self.linear(h, p + "self_attn.v_proj.weight", lora, (l, "v_proj"), scale, b("v_proj"))
            q, k = self.rope(q, self.H), self.rope(k, self.KV)
            q = q.view(T, self.H, self.hd).transpose(0, 1)
            rep = self.H // self.KV
            k = k.view(T, self.KV, self.hd).transpose(0, 1).repeat_interleave(rep, 0)
            v = v.view(T, self.KV, self.hd).transpose(0, 1).repeat_interleave(rep, 0)
            att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(self.hd) + mask, -1)
            o = (att @ v).transpose(0, 1).reshape(T, self.H * self.hd)
            x = x + self.linear(o, p + "self_attn.o_proj.weight", lora, (l, "o_proj"), scale)
            h = self.rms(x, w[p + "post_attention_layernorm.weight"])
            g = self.linear(h, p + "mlp.gate_proj.weight", lora, (l, "gate_proj"), scale)
            u = self.linear(h, p + "mlp.up_proj.weight", lora, (l, "up_proj"), scale)
            x = x + self.linear(torch.nn.functional.silu(g) * u, p + "mlp.down_proj.weight", lora, (l, "down_proj"), scale)
        h = self.rms(x, w["model.norm.weight"])
        y = h @ self.lm.T
        if "lm_head" in lora:
            A, B = lora["lm_head"]
            y = y + scale * (h @ A.T) @ B.T
        return y


def loss_fn(name, cfg, lp, inp):
    w = inp.get("weights")
    mask = torch.tensor(w, dtype=DT) if w is not None else torch.ones_like(lp)
    if name == "cross_entropy":
        return -(lp * mask).sum()
    old = torch.tensor(inp["logprobs"], dtype=DT)
    A = torch.tensor(inp["advantages"], dtype=DT)
    r = torch.exp(lp - old)
    if name == "importance_sampling":
        return -(r * A * mask).sum()
    if name == "ppo":
        lo, hi = cfg.get("clip_low_threshold", 0.8), cfg.get("clip_high_threshold", 1.2)
        return -(torch.minimum(r * A, torch.clamp(r, lo, hi) * A) * mask).sum()
    if name == "cispo":
        lo, hi = cfg.get("clip_low_threshold", 0.0), cfg.get("clip_high_threshold", 4.0)
        return -(torch.clamp(r, lo, hi).detach() * lp * A * mask).sum()
    if name == "dro":
        beta = cfg.get("beta", 0.01)
        return -((lp * A - 0.5 * beta * (lp - old) ** 2) * mask).sum()
    if name == "gspo":
        # GSPO-token as tinker-docs /tinker/losses/gspo/ writes it: the sequence log-ratio
        # is the mean token log-ratio over the tokens sequence_ratio_mask marks; every
        # token carries its value with its own log-probability's gradient.
        lo, hi = cfg.get("clip_low_threshold", 0.8), cfg.get("clip_high_threshold", 1.2)
        in_ratio = torch.tensor(inp["sequence_ratio_mask"], dtype=DT) != 0
        log_ratio = (lp.detach() - old)[in_ratio].mean()
        ratio = torch.exp(log_ratio + lp - lp.detach())
        clipped = torch.clamp(ratio, lo, hi)
        return -(torch.minimum(ratio * A, clipped * A) * mask).sum()
    raise ValueError(name)


def main(model_dir, out):
    m = Model(model_dir)
    V = m.cfg["vocab_size"]
    rng = np.random.default_rng(1234)
    rank, alpha = 4, 8.0
    scale = alpha / rank
    dims = {}
    q, kv = m.H * m.hd, m.KV * m.hd
    I = m.cfg["intermediate_size"]
    for p, (i, o) in {"q_proj": (m.D, q), "k_proj": (m.D, kv), "v_proj": (m.D, kv), "o_proj": (q, m.D),
                      "gate_proj": (m.D, I), "up_proj": (m.D, I), "down_proj": (I, m.D)}.items():
        dims[p] = (i, o)
    init = {}
    for l in range(m.L):
        for p in PROJ:
            i, o = dims[p]
            init[peft_name(l, p, "A")] = torch.tensor(rng.normal(0, 0.05, (rank, i)), dtype=DT)
            init[peft_name(l, p, "B")] = torch.tensor(rng.normal(0, 0.05, (o, rank)), dtype=DT)
    init["base_model.model.lm_head.lora_A.weight"] = torch.tensor(rng.normal(0, 0.05, (rank, m.D)), dtype=DT)
    init["base_model.model.lm_head.lora_B.weight"] = torch.tensor(rng.normal(0, 0.05, (V, rank)), dtype=DT)
    # Store what Go reads (float32) and compute from exactly those values.
    init = {k: v.to(torch.float32).to(DT) for k, v in init.items()}
    os.makedirs(os.path.join(out, "adapter"), exist_ok=True)
    write_safetensors(os.path.join(out, "adapter", "adapter_model.safetensors"), init, {"format": "pt"})
    json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": alpha, "lora_dropout": 0.0,
               "target_modules": sorted(PROJ + ["lm_head"]), "bias": "none", "fan_in_fan_out": False,
               "base_model_name_or_path": "tiny", "inference_mode": True, "use_rslora": False, "use_dora": False,
               "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {}},
              open(os.path.join(out, "adapter", "adapter_config.json"), "w"), indent=2)

    datums = []
    for n in (9, 5):
        toks = [int(t) for t in rng.integers(0, V, n)]
        tgt = [int(t) for t in rng.integers(0, V, n)]
        datums.append({"tokens": toks, "target_tokens": tgt,
                       "weights": [float(x) for x in rng.uniform(0.5, 1.5, n).astype(np.float32)],
                       "logprobs": [float(x) for x in rng.uniform(-7.5, -5.0, n).astype(np.float32)],
                       "advantages": [float(x) for x in rng.uniform(-1, 1, n).astype(np.float32)]})
    # Drawn after the datums so the earlier fixtures stay as they were: GSPO's ratio covers
    # a suffix of each datum (the "sampled" tokens).
    for d in datums:
        n = len(d["tokens"])
        cut = int(rng.integers(1, n - 1))
        d["sequence_ratio_mask"] = [0.0] * cut + [1.0] * (n - cut)
    losses = {"cross_entropy": {}, "importance_sampling": {}, "ppo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
              "cispo": {}, "dro": {"beta": 0.05}, "gspo": {"clip_low_threshold": 0.5, "clip_high_threshold": 1.5}}
    json.dump({"datums": datums, "losses": losses, "rank": rank, "alpha": alpha,
               "adamw": {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.01, "grad_clip_norm": 1.0}},
              open(os.path.join(out, "inputs.json"), "w"), indent=1)

    expected, values = {}, {}
    with torch.no_grad():
        lg = torch.log_softmax(m.logits(datums[0]["tokens"], {}, scale), -1)
        expected["base/logprobs/0"] = lg[torch.arange(len(datums[0]["tokens"])), torch.tensor(datums[0]["target_tokens"])]
    for name, cfg in losses.items():
        params = {k: v.clone().requires_grad_(True) for k, v in init.items()}
        lora = {(l, p): (params[peft_name(l, p, "A")], params[peft_name(l, p, "B")]) for l in range(m.L) for p in PROJ}
        lora["lm_head"] = (params["base_model.model.lm_head.lora_A.weight"], params["base_model.model.lm_head.lora_B.weight"])
        total = 0
        for i, d in enumerate(datums):
            lp_all = torch.log_softmax(m.logits(d["tokens"], lora, scale), -1)
            lp = lp_all[torch.arange(len(d["tokens"])), torch.tensor(d["target_tokens"])]
            expected[f"{name}/logprobs/{i}"] = lp.detach()
            inp = {"weights": d["weights"]} if name == "cross_entropy" else {"logprobs": d["logprobs"], "advantages": d["advantages"]}
            if name == "gspo":
                inp.update(weights=d["weights"], sequence_ratio_mask=d["sequence_ratio_mask"])
                in_r = torch.tensor(d["sequence_ratio_mask"]) != 0
                s_i = float(torch.exp((lp.detach() - torch.tensor(d["logprobs"], dtype=DT))[in_r].mean()))
                print(f"gspo datum {i}: sequence ratio {s_i:.4f}", file=sys.stderr)
            total = total + loss_fn(name, cfg, lp, inp)
        total.backward()
        values[name] = float(total)
        for k, p in params.items():
            expected[f"{name}/grad/{k}"] = p.grad.detach().clone()
        if name == "cross_entropy":
            ap = json.load(open(os.path.join(out, "inputs.json")))["adamw"]
            torch.nn.utils.clip_grad_norm_(list(params.values()), ap["grad_clip_norm"])
            opt = torch.optim.AdamW(list(params.values()), lr=ap["learning_rate"], betas=(ap["beta1"], ap["beta2"]),
                                    eps=ap["eps"], weight_decay=ap["weight_decay"])
            opt.step()
            for k, p in params.items():
                expected[f"adamw/{k}"] = p.detach().clone()
    # Dimuon, TuFT's reading (engine/dimuon.go), two steps of cross-entropy from the same
    # adapter. Independent of the engine's Newton-Schulz iteration: the matrix sign here is
    # U·Vh of an SVD. Weights and momentum are rounded to float32 after each step, as the
    # engine stores them.
    dp = {"learning_rate": 0.02, "beta1": 0.9, "grad_clip_norm": 5.0, "damping": 0.1, "rank_lr_correction_exponent": 0.5, "steps": 2}
    params = {k: v.clone().requires_grad_(True) for k, v in init.items()}
    lora = {(l, p): (params[peft_name(l, p, "A")], params[peft_name(l, p, "B")]) for l in range(m.L) for p in PROJ}
    lora["lm_head"] = (params["base_model.model.lm_head.lora_A.weight"], params["base_model.model.lm_head.lora_B.weight"])
    mom = {k: torch.zeros_like(v) for k, v in init.items()}
    for step in range(dp["steps"]):
        for p in params.values():
            p.grad = None
        total = 0
        for d in datums:
            lp_all = torch.log_softmax(m.logits(d["tokens"], lora, scale), -1)
            lp = lp_all[torch.arange(len(d["tokens"])), torch.tensor(d["target_tokens"])]
            total = total + loss_fn("cross_entropy", {}, lp, {"weights": d["weights"]})
        total.backward()
        norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in params.values()))
        clip = min(1.0, dp["grad_clip_norm"] / (norm + 1e-6)) if dp["grad_clip_norm"] > 0 else 1.0
        print(f"dimuon step {step}: grad norm {norm:.4f}, clip {clip:.4f}", file=sys.stderr)
        eta = dp["learning_rate"] * (32 / rank) ** dp["rank_lr_correction_exponent"]
        with torch.no_grad():
            for k, p in params.items():
                mk = (dp["beta1"] * mom[k] + (1 - dp["beta1"]) * clip * p.grad).to(torch.float32).to(DT)
                mom[k] = mk
                if not bool((mk != 0).any()):
                    continue
                sq = mk * mk
                dmp = dp["damping"] * sq.mean()
                pre = mk * (sq.mean(1, keepdim=True) + dmp) ** -0.25 * (sq.mean(0, keepdim=True) + dmp) ** -0.25
                u, _, vh = torch.linalg.svd(pre, full_matrices=False)
                o = u @ vh
                p.copy_((p - eta * math.sqrt(rank) * o / o.norm()).to(torch.float32).to(DT))
    for k, p in params.items():
        expected[f"dimuon/{k}"] = p.detach().clone()
        expected[f"dimuon_momentum/{k}"] = mom[k].clone()
    inputs = json.load(open(os.path.join(out, "inputs.json")))
    inputs["dimuon"] = dp
    json.dump(inputs, open(os.path.join(out, "inputs.json"), "w"), indent=1)
    write_safetensors(os.path.join(out, "expected.safetensors"), expected, {"torch": torch.__version__})
    json.dump(values, open(os.path.join(out, "expected.json"), "w"), indent=1)
    print("wrote", out, {k: round(v, 6) for k, v in values.items()})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
