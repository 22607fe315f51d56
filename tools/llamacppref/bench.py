#!/usr/bin/env python3
"""llama.cpp (through llama-cpp-python's low-level C API) as the CPU reference of
`tuft-bench engine --reference llama.cpp`, on the GGUF file tuft loads.

    bench.py convert --src IN.gguf --weights f32|bf16|q8_0|q4_1|q4_k --out OUT.gguf
        writes OUT: IN's tensors dequantised to F32 (ggml's gguf package; metadata
        copied), and for bf16/q8_0/q4_1 every matrix then stored in that type by ggml's
        reference quantiser (gguf.quants.quantize; norms stay F32); for q4_k the F32 copy
        quantised by llama.cpp to Q4_K_M (llama_model_quantize), whose blocks the engine
        in q4_k keeps, as the engine's
        engine.cpu_weight_format quantises at load (dequant_gguf.py beside this script, which
        tests/realmodel uses too): both sides compute with the same weights. Prints one JSON line
        {"path", "weights"}.

    bench.py run --model M.gguf --threads N --prompt P --new-tokens G --batch B
                 --pp-tokens T --vocab-salt S [--repeats R]
        measures with n_threads = n_threads_batch = N (F32 KV cache, as tuft's):
          pp:  one llama_decode of T prompt tokens (logits of the last only), best of R;
          tg1: after a P-token prompt, G single-token llama_decode steps (sequence 0);
          tgB: the P-token prompt decoded once in sequence 0 and copied to sequences
               1..B-1 (llama_memory_seq_cp, as tuft forks its cache), then G steps each
               one llama_decode of B tokens (one per sequence, logits for all B).
        Token ids follow cmd/tuft-bench's benchTokens formula. Each figure carries the
        process CPU time over its wall time (threads in use), and the output has
        llama_print_system_info() (the SIMD path ggml was built for). Prints one JSON line.
"""
import argparse
import json
import os
import resource
import sys
import time

import llama_cpp

WEIGHTS = ("f32", "bf16", "q8_0", "q4_1", "q4_k")
GGML_TYPE_F32 = 0


def bench_tokens(n, vocab, salt):
    return [(i * 7919 + salt) % vocab for i in range(n)]


def convert(a):
    # dequant_gguf.py beside this script (also tests/realmodel's converter): one
    # dequantise/requantise for both, so they compute with the same weights.
    from dequant_gguf import main as dequant
    tmp = a.out + ".tmp"
    # q4_k: llama.cpp's own Q4_K_M quantisation of the F32 copy (dequant_gguf.py q4_k_m).
    typ = {"f32": None, "q4_k": "q4_k_m"}.get(a.weights, a.weights)
    dequant(a.src, tmp, typ)
    os.replace(tmp, a.out)
    print(json.dumps({"path": a.out, "weights": a.weights}))


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Ctx:
    def __init__(self, model, threads, n_ctx, n_seq):
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = n_ctx
        p.n_batch = p.n_ubatch = max(512, n_seq)
        p.n_seq_max = n_seq
        p.n_threads = p.n_threads_batch = threads
        p.type_k = p.type_v = GGML_TYPE_F32
        p.no_perf = False
        self.ctx = llama_cpp.llama_init_from_model(model, p)
        if not self.ctx:
            sys.exit("llama_init_from_model failed")
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(max(512, n_seq), 0, n_seq)

    def decode(self, items):
        """items: (token, pos, seq, logits) tuples, decoded as one batch."""
        b = self.batch
        for i, (tok, pos, seq, out) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, pos, 1, 1 if out else 0
            b.seq_id[i][0] = seq
        b.n_tokens = len(items)
        rc = llama_cpp.llama_decode(self.ctx, b)
        if rc != 0:
            sys.exit(f"llama_decode returned {rc}")
        llama_cpp.llama_synchronize(self.ctx)

    def clear(self):
        llama_cpp.llama_memory_clear(self.mem, True)

    def close(self):
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)


def timed(fn):
    c0, t0 = cpu_s(), time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    return wall, (cpu_s() - c0) / wall


def run(a):
    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    model = llama_cpp.llama_model_load_from_file(a.model.encode(), mp)
    if not model:
        sys.exit(f"cannot load {a.model}")
    vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    prompt = bench_tokens(a.prompt, vocab, a.vocab_salt)
    gen = bench_tokens(a.new_tokens, vocab, a.vocab_salt + 1)
    pp = bench_tokens(a.pp_tokens, vocab, a.vocab_salt)
    out = {"impl": "llama.cpp", "llama_cpp_version": llama_cpp.__version__, "python": sys.version.split()[0],
           "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
           "threads": a.threads, "model": a.model, "model_size_bytes": int(llama_cpp.llama_model_size(model)),
           "n_params": int(llama_cpp.llama_model_n_params(model)), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "")}
    # Without a unified KV cache each sequence gets n_ctx / n_seq_max cells.
    n_ctx = a.batch * (max(a.prompt + a.new_tokens, a.pp_tokens) + 16)
    c = Ctx(model, a.threads, n_ctx, a.batch)

    def prefill():
        c.decode([(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])

    def tg1():
        for j, t in enumerate(gen):
            c.decode([(t, a.prompt + j, 0, True)])

    def tgb():
        for j, t in enumerate(gen):
            c.decode([((t + s) % vocab, a.prompt + j, s, True) for s in range(a.batch)])

    def ppf():
        c.decode([(t, i, 0, i == len(pp) - 1) for i, t in enumerate(pp)])

    # Warm-up: every shape once (thread pool, graph allocation, weights paged in).
    c.clear()
    prefill()
    c.decode([(gen[0], a.prompt, 0, True)])
    c.clear()
    ppf()

    best = None
    for _ in range(a.repeats):
        c.clear()
        w, u = timed(ppf)
        if best is None or w < best[0]:
            best = (w, u)
    out["pp"] = {"tokens": a.pp_tokens, "seconds": best[0], "tokens_per_s": a.pp_tokens / best[0], "cpu_util": best[1]}

    c.clear()
    prefill()
    w, u = timed(tg1)
    out["tg"] = [{"batch": 1, "steps": a.new_tokens, "tokens": a.new_tokens, "seconds": w,
                  "tokens_per_s": a.new_tokens / w, "cpu_util": u}]
    if a.batch > 1:
        c.clear()
        prefill()
        for s in range(1, a.batch):
            llama_cpp.llama_memory_seq_cp(c.mem, 0, s, -1, -1)
        w, u = timed(tgb)
        n = a.new_tokens * a.batch
        out["tg"].append({"batch": a.batch, "steps": a.new_tokens, "tokens": n, "seconds": w,
                          "tokens_per_s": n / w, "cpu_util": u})
    c.close()
    llama_cpp.llama_model_free(model)
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    cv = sub.add_parser("convert")
    cv.add_argument("--src", required=True)
    cv.add_argument("--weights", required=True, choices=WEIGHTS)
    cv.add_argument("--out", required=True)
    r = sub.add_parser("run")
    r.add_argument("--model", required=True)
    r.add_argument("--threads", type=int, required=True)
    r.add_argument("--prompt", type=int, default=8)
    r.add_argument("--new-tokens", type=int, default=128)
    r.add_argument("--batch", type=int, default=16)
    r.add_argument("--pp-tokens", type=int, default=128)
    r.add_argument("--vocab-salt", type=int, default=101)
    r.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if a.cmd == "convert":
        convert(a)
    else:
        run(a)


if __name__ == "__main__":
    main()
