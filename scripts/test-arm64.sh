#!/usr/bin/env bash
# The engine's numeric packages on arm64: their tests are cross-compiled
# (GOARCH=arm64 go test -c) and run under qemu-aarch64-static (Debian's qemu-user-static,
# which scripts/setup.sh installs), each in its package directory as `go test` would.
# engine/kern takes its NEON assembly there (kern_arm64.s), and its tests run every
# product both through it and through the portable Go path (withGeneric, atLevel), which
# is also what every other non-amd64 machine and -tags purego run: the script prints the
# two paths (TestKernelPaths) before the package's suite. On an arm64 machine the same
# tests run natively in `go test ./engine/...`, and this script says so and stops.
#
# Packages: kern (matrix products, dot, axpy), gguf (reader, dequantisation, writer:
# byte order and unaligned reads), safetensors, device (the CPU device's kernels). The
# tokenizer's and the engine's own suites are left out: under emulation they take minutes
# and hold no architecture-specific code.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(kern gguf safetensors device)
case "$(uname -m)" in
  aarch64|arm64) echo "test-arm64: skipped: this machine is arm64, its native go test ./engine/... covers these packages"; exit 0 ;;
esac
qemu="$(command -v qemu-aarch64-static || command -v qemu-aarch64 || true)"
if [ -z "$qemu" ]; then
  echo "test-arm64: qemu-aarch64-static not found (apt-get install qemu-user-static, as scripts/setup.sh does)" >&2
  exit 1
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for p in "${pkgs[@]}"; do
  CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go test -c -o "$out/$p.test" "./engine/$p/"
  echo "test-arm64: engine/$p under $(basename "$qemu")"
  if [ "$p" = kern ]; then
    (cd "engine/$p" && "$qemu" "$out/$p.test" -test.count=1 -test.run '^TestKernelPaths$' -test.v | grep 'kernel path')
  fi
  (cd "engine/$p" && "$qemu" "$out/$p.test" -test.count=1 -test.timeout=15m)
done
# engine/kern once more with -tags purego: the build every other architecture gets
# (kern_other.go's twins of the assembly, including the packed driver's micro-kernel),
# which the default arm64 build no longer compiles.
CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go test -tags purego -c -o "$out/kern-purego.test" ./engine/kern/
echo "test-arm64: engine/kern -tags purego under $(basename "$qemu")"
(cd engine/kern && "$qemu" "$out/kern-purego.test" -test.count=1 -test.run '^TestKernelPaths$' -test.v | grep 'kernel path')
(cd engine/kern && "$qemu" "$out/kern-purego.test" -test.count=1 -test.timeout=15m)
