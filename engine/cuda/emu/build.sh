#!/usr/bin/env bash
# Builds emu.cpp, the CPU emulation of libcuda and cuBLAS, into DIR as libcuda.so.1,
# libcublas.so.12 and libcublasLt.so.12. Point the CUDA device at it with
# TUFT_CUDA_LIB_DIRS=DIR (tests) or engine.cuda_lib_dirs. Needs g++ (C++20).
set -euo pipefail
out="${1:?usage: build.sh DIR}"
mkdir -p "$out"
g++ -std=c++20 -O2 -fPIC -shared -fvisibility=hidden -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=0 \
  -o "$out/libcuda.so.1" "$(dirname "$0")/emu.cpp"
ln -sf libcuda.so.1 "$out/libcublas.so.12"
ln -sf libcuda.so.1 "$out/libcublasLt.so.12"
