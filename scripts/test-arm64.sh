#!/usr/bin/env bash
# The engine's numeric packages on arm64: their tests are cross-compiled
# (GOARCH=arm64 go test -c) and run under qemu-aarch64-static (Debian's qemu-user-static,
# which scripts/setup.sh installs), each in its package directory as `go test` would.
# engine/kern takes its NEON assembly there (kern_arm64.s), and its tests run every
# product both through it and through the portable Go path (withGeneric, atLevel), which
# is also what every other non-amd64 machine and -tags purego run: the script prints the
# two paths (TestKernelPaths) before the package's suite. qemu runs with -cpu max, a core
# with the ARMv8.2 dot product, so the integer tiles take SDOT (frozenq8_arm64.s; the log
# says "integer tiles sdot"); engine/kern's integer-tile tests then run once more on a
# Cortex-A53 (ARMv8.0, no dot product), where the detection must leave them portable. On
# an arm64 machine the same tests run natively in `go test ./engine/...`, and this script
# says so and stops.
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
qemu=("$qemu" -cpu max)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for p in "${pkgs[@]}"; do
  CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go test -c -o "$out/$p.test" "./engine/$p/"
  echo "test-arm64: engine/$p under $(basename "${qemu[0]}") -cpu max"
  if [ "$p" = kern ]; then
    line="$(cd "engine/$p" && "${qemu[@]}" "$out/$p.test" -test.count=1 -test.run '^TestKernelPaths$' -test.v | grep 'kernel path')"
    echo "$line"
    case "$line" in *'integer tiles "sdot"'*) ;; *) echo "test-arm64: the dot-product tiles are off under -cpu max" >&2; exit 1 ;; esac
  fi
  (cd "engine/$p" && "${qemu[@]}" "$out/$p.test" -test.count=1 -test.timeout=15m)
  if [ "$p" = kern ]; then
    echo "test-arm64: engine/kern's integer tiles under $(basename "${qemu[0]}") -cpu cortex-a53 (no dot product)"
    line="$(cd engine/kern && "${qemu[0]}" -cpu cortex-a53 "$out/kern.test" -test.count=1 -test.run '^TestKernelPaths$' -test.v | grep 'kernel path')"
    echo "$line"
    case "$line" in *'integer tiles "portable"'*) ;; *) echo "test-arm64: the dot-product tiles are on without the dot product" >&2; exit 1 ;; esac
    (cd engine/kern && "${qemu[0]}" -cpu cortex-a53 "$out/kern.test" -test.count=1 -test.run 'Q8|Q4Int|QuantActs|NEON')
  fi
done
# engine/kern once more with -tags purego: the build every other architecture gets
# (kern_other.go's twins of the assembly, including the packed driver's micro-kernel),
# which the default arm64 build no longer compiles.
CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go test -tags purego -c -o "$out/kern-purego.test" ./engine/kern/
echo "test-arm64: engine/kern -tags purego under $(basename "${qemu[0]}") -cpu max"
(cd engine/kern && "${qemu[@]}" "$out/kern-purego.test" -test.count=1 -test.run '^TestKernelPaths$' -test.v | grep 'kernel path')
(cd engine/kern && "${qemu[@]}" "$out/kern-purego.test" -test.count=1 -test.timeout=15m)
