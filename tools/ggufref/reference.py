#!/usr/bin/env python3
"""The `gguf` Python package (ggml's own, from PyPI) as the reference for engine/gguf.

    reference.py OUT_DIR

writes, deterministically (seeded):
  OUT_DIR/dequant.json  for each tensor type: raw block bytes (hex; random, with the
                        f16 scale fields set to moderate values) and the float32 values
                        gguf.quants.dequantize gives for them
  OUT_DIR/ref.gguf      a small file from gguf.GGUFWriter: one metadata entry of every
                        value type (arrays included) and tensors of F32, F16, Q8_0 and Q4_K,
  OUT_DIR/ref.json      what ref.gguf holds: metadata and each tensor's dequantised values

Checking only (CI does not run Python): engine/gguf's tests compare against the files.
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

rng = np.random.default_rng(1234)

# Byte offsets of f16 scale fields in each block, set to moderate values so that no block
# decodes to inf or NaN.
SCALES = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}


def raw_blocks(t, nblocks):
    bsize, tsize = gguf.GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, size=nblocks * tsize, dtype=np.uint8)
    for b in range(nblocks):
        for off in SCALES.get(t, []):
            h = np.array([rng.uniform(-0.05, 0.05)], dtype=np.float16).view(np.uint8)
            raw[b * tsize + off:b * tsize + off + 2] = h
    return raw, nblocks * bsize


def main(out):
    os.makedirs(out, exist_ok=True)
    cases = []
    for t in [T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q4_K, T.Q5_K, T.Q6_K]:
        raw, n = raw_blocks(t, 3)
        vals = dequantize(raw, t).reshape(-1).astype(np.float32)
        assert vals.size == n and np.isfinite(vals).all()
        cases.append({"type": t.name, "code": int(t), "raw": raw.tobytes().hex(),
                      "values": [float(v) for v in vals]})
    for t, arr in [(T.F16, rng.standard_normal(8).astype(np.float16)),
                   (T.F32, rng.standard_normal(8).astype(np.float32))]:
        raw = arr.view(np.uint8)
        cases.append({"type": t.name, "code": int(t), "raw": raw.tobytes().hex(),
                      "values": [float(v) for v in arr.astype(np.float32)]})
    bf = rng.standard_normal(8).astype(np.float32)
    bf16 = (bf.view(np.uint32) >> 16).astype(np.uint16)
    cases.append({"type": "BF16", "code": int(T.BF16), "raw": bf16.view(np.uint8).tobytes().hex(),
                  "values": [float(v) for v in (bf16.astype(np.uint32) << 16).view(np.float32)]})
    with open(os.path.join(out, "dequant.json"), "w") as f:
        json.dump({"gguf_version": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0",
                   "cases": cases}, f, indent=1)

    w = gguf.GGUFWriter(os.path.join(out, "ref.gguf"), "llama")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo ▁ wörld")
    w.add_uint64("t.u64", 2**60)
    w.add_int64("t.i64", -(2**60))
    w.add_float64("t.f64", 2.25)
    w.add_array("t.strs", ["a", "", "ç"])
    w.add_array("t.i32s", [1, -2, 3])
    w.add_array("t.f32s", [0.5, -1.25])
    tensors = {}
    a = rng.standard_normal((3, 32)).astype(np.float32)
    w.add_tensor("a.f32", a)
    tensors["a.f32"] = a
    h = rng.standard_normal((2, 64)).astype(np.float16)
    w.add_tensor("b.f16", h)
    tensors["b.f16"] = h.astype(np.float32)
    raw, n = raw_blocks(T.Q8_0, 4)
    w.add_tensor("c.q8_0", raw.reshape(2, -1), raw_dtype=T.Q8_0)
    tensors["c.q8_0"] = dequantize(raw, T.Q8_0).reshape(2, -1)
    raw, n = raw_blocks(T.Q4_K, 2)
    w.add_tensor("d.q4_k", raw.reshape(2, -1), raw_dtype=T.Q4_K)
    tensors["d.q4_k"] = dequantize(raw, T.Q4_K).reshape(2, -1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump({"tensors": {k: {"shape": list(v.shape), "values": [float(x) for x in v.reshape(-1)]}
                               for k, v in tensors.items()}}, f)


if __name__ == "__main__":
    main(sys.argv[1])
