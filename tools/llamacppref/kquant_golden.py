#!/usr/bin/env python3
"""Writes engine/kern/testdata/ggml_kquants.bin: rows of float32 weights and the blocks
ggml's reference quantisers make of them (quantize_row_q4_K_ref, quantize_row_q5_0_ref,
quantize_row_q6_K_ref, called through llama-cpp-python's libggml-base), so the engine's quantisers are checked
byte for byte against ggml's (engine/kern TestKQuantsAreGGMLs).

    kquant_golden.py OUT.bin

Layout: int32 rows, int32 cols, rows*cols float32, then the Q4_K blocks, then the Q5_0
blocks, then the Q6_K blocks (little-endian).
"""
import ctypes
import os
import struct
import sys

import numpy as np
import llama_cpp

ROWS, COLS = 6, 512


def main(out):
    lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    rng = np.random.default_rng(26)
    x = (rng.standard_normal((ROWS, COLS)) * 0.05).astype(np.float32)
    x[1, ::37] *= 20                      # outliers, as real weights have
    x[2] = np.abs(x[2]) + 0.01            # all positive: the zero-minimum branch
    x[3, :256] = 0                        # an all-zero super-block
    x[4] = rng.uniform(-1, 1, COLS).astype(np.float32)
    x[5] = (rng.standard_normal(COLS) * 1e-3).astype(np.float32)
    x[0, 272:288] = 0                     # an all-zero group of 16 (Q6_K) in a live super-block
    x[5, 288:304] = 1e-20                 # a group below GROUP_MAX_EPS
    x = np.ascontiguousarray(x)
    fp = x.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    q4k = ctypes.create_string_buffer(ROWS * COLS // 256 * 144)
    q50 = ctypes.create_string_buffer(ROWS * COLS // 32 * 22)
    q6k = ctypes.create_string_buffer(ROWS * COLS // 256 * 210)
    lib.quantize_row_q4_K_ref(fp, q4k, ctypes.c_int64(ROWS * COLS))
    lib.quantize_row_q5_0_ref(fp, q50, ctypes.c_int64(ROWS * COLS))
    lib.quantize_row_q6_K_ref(fp, q6k, ctypes.c_int64(ROWS * COLS))
    with open(out, "wb") as f:
        f.write(struct.pack("<ii", ROWS, COLS))
        f.write(x.astype("<f4").tobytes())
        f.write(q4k.raw)
        f.write(q50.raw)
        f.write(q6k.raw)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
