#!/usr/bin/env python3
"""Writes a GGUF file's tensors dequantised to F32 (metadata copied), with ggml's gguf
package, so that llama.cpp can score the very values the engine computes with (its
quantised kernels also quantise activations to 8 bits, the F32 path does not).

    dequant_gguf.py IN.gguf OUT.gguf [TYPE]

With TYPE (bf16, q8_0 or q4_1) every matrix is then stored in that type instead (ggml's
reference quantiser, as the engine's engine.cpu_weight_format applies at load), norms
stay F32: llama.cpp on that file and the engine in that format compute with the same
weights.

With TYPE q4_k_m the F32 copy is then quantised by llama.cpp itself
(llama_model_quantize, LLAMA_FTYPE_MOSTLY_Q4_K_M, no importance matrix: its own mix of
Q4_K, Q6_K and, for rows that are not whole 256-blocks, Q5_0/Q8_0); this needs
llama-cpp-python (the llama.cpp venv). The engine in q4_k keeps that file's blocks.
"""
import ctypes
import os
import sys

import numpy as np
import gguf
from gguf.quants import dequantize, quantize


TYPES = {"bf16": (gguf.GGMLQuantizationType.BF16, gguf.LlamaFileType.MOSTLY_BF16),
         "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
         "q4_1": (gguf.GGMLQuantizationType.Q4_1, gguf.LlamaFileType.MOSTLY_Q4_1)}


LLAMA_FTYPE_MOSTLY_Q4_K_M = 15


def q4_k_m(src, dst):
    import llama_cpp
    tmp = dst + ".f32.tmp"
    main(src, tmp)
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = LLAMA_FTYPE_MOSTLY_Q4_K_M
    p.nthread = 2
    try:
        rc = llama_cpp.llama_model_quantize(tmp.encode(), dst.encode(), ctypes.byref(p))
    finally:
        os.remove(tmp)
    if rc != 0:
        sys.exit(f"llama_model_quantize returned {rc}")


def main(src, dst, typ=None):
    if typ == "q4_k_m":
        return q4_k_m(src, dst)
    qtype, ftype = TYPES[typ] if typ else (None, gguf.LlamaFileType.ALL_F32)
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = f.types[0]
        if key == "general.file_type":
            w.add_file_type(ftype)
            continue
        sub = f.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, f.contents(), vtype, sub_type=sub)
    for t in r.tensors:
        arr = dequantize(t.data, t.tensor_type).astype(np.float32)
        arr = arr.reshape([int(d) for d in reversed(t.shape)])
        if qtype is not None and arr.ndim == 2:
            w.add_tensor(t.name, quantize(arr, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(t.name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] not in (*TYPES, "q4_k_m")):
        sys.exit(__doc__)
    main(*sys.argv[1:])
