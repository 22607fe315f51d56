#!/usr/bin/env bash
# Builds, on any machine with Go, everything scripts/gpu-check.sh runs on a GPU machine
# that has no network and no Go: static binaries with the CUDA device (which loads
# libcuda and cuBLAS at run time, so no CGO), into bin/ (ignored by git).
#
#   bash scripts/gpu-build.sh            # then copy the repository (with bin/) to the GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."
out=bin
mkdir -p "$out"
flags=(-tags cuda -trimpath -ldflags='-s -w')
export CGO_ENABLED=0 GOOS=linux GOARCH="${GOARCH:-amd64}"
go build "${flags[@]}" -o "$out/tuft" ./cmd/tuft
go build "${flags[@]}" -o "$out/tuft-bench" ./cmd/tuft-bench
go build "${flags[@]}" -o "$out/example-sft" ./examples/sft
# Test binaries run from their package directory (testdata is read relative to it).
go test -c "${flags[@]}" -o "$out/engine-cuda.test" ./engine/
go test -c "${flags[@]}" -o "$out/cuda.test" ./engine/cuda/
git rev-parse HEAD >"$out/COMMIT" 2>/dev/null || echo unknown >"$out/COMMIT"
ls -l "$out"
