#!/usr/bin/env python3
"""Writes a GGUF file's tensors dequantised to F32 (metadata copied), with ggml's gguf
package, so that llama.cpp can score the very values the engine computes with (its
quantised kernels also quantise activations to 8 bits, the F32 path does not).

    dequant_gguf.py IN.gguf OUT.gguf
"""
import sys

import numpy as np
import gguf
from gguf.quants import dequantize


def main(src, dst):
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = f.types[0]
        if key == "general.file_type":
            w.add_file_type(gguf.LlamaFileType.ALL_F32)
            continue
        sub = f.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, f.contents(), vtype, sub_type=sub)
    for t in r.tensors:
        arr = dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, arr.reshape([int(d) for d in reversed(t.shape)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
