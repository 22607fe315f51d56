#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs prerequisites (scripts/setup.sh),
# then static checks, unit and integration tests (with the race detector on the control
# plane), the persistence suite against a real Redis, the end-to-end telemetry test
# against a real OpenTelemetry Collector, and the Tinker SDK conformance suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export TUFT_REQUIRE_REDIS=1 TUFT_REQUIRE_OTELCOL=1

bash scripts/setup.sh

echo "== go vet"
go vet ./...

echo "== gofmt"
unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"
if [ -n "$unformatted" ]; then echo "not gofmt-ed:"; echo "$unformatted"; exit 1; fi

echo "== NVML GPU metrics (cgo, -tags nvml; the test skips where there is no GPU or driver)"
CGO_CFLAGS="-O2 -Wno-deprecated-declarations" go vet -tags nvml ./telemetry/
nvml_out="$(CGO_CFLAGS="-O2 -Wno-deprecated-declarations" go test -count=1 -tags nvml -run NVML -v ./telemetry/ 2>&1)" || { echo "$nvml_out"; exit 1; }
echo "$nvml_out" | grep -E '^(---|ok)|gpu_nvml' || true

echo "== go test (engine, numeric kernels, examples: compute-heavy, without the race detector)"
go test -count=1 -timeout 20m ./engine/... ./examples/...

echo "== go test -race (control plane, telemetry, stores, client, CLI, restart and end-to-end tests)"
go test -count=1 -race -timeout 20m $(go list ./... | grep -v -e '/engine' -e '/examples')

# --- Kubernetes manifests (deploy/k8s), checked offline by tools/kubecheck, a separate Go
# --- module so the product module gains no Kubernetes dependencies.
echo "== Kubernetes manifests"
(cd tools/kubecheck && go test ./... && go run . ../../deploy/k8s)

if [ -d tests/conformance ]; then
  echo "== Tinker SDK conformance suite"
  bash tests/conformance/run.sh
fi
if [ -d tests/cookbook ]; then
  echo "== tinker-cookbook recipes (tests/cookbook)"
  bash tests/cookbook/run.sh
fi
echo "== all tests passed"
