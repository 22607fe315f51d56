#!/usr/bin/env bash
# Builds a real OpenTelemetry Collector (otelcol-dev) from the Go module proxy with the
# Collector Builder, into $OTELCOL_CACHE (default ~/.cache/tuft/otelcol). Skips the build
# when the binary is already there. Prints the binary's path.
#
# The builder's own `go mod tidy` fails on this proxy (a test-only dependency of the file
# exporter is not served), so the build finishes with `go mod tidy -e` + `go build`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${OTELCOL_CACHE:-$HOME/.cache/tuft/otelcol}"
bin="$cache/otelcol-dev"
stamp="$cache/.manifest.sha256"
want="$(sha256sum "$here/builder-config.yaml" | cut -d' ' -f1)"
if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$cache"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
GOBIN="$cache/bin" go install go.opentelemetry.io/collector/cmd/builder@v0.162.0 >&2
cp "$here/builder-config.yaml" "$work/"
cd "$work"
"$cache/bin/builder" --config=builder-config.yaml >"$work/builder.log" 2>&1 || true
if [ ! -f dist/main.go ]; then
  cat "$work/builder.log" >&2
  echo "otelcol build: the builder did not generate sources" >&2
  exit 1
fi
cd dist
go mod tidy -e >/dev/null 2>&1 || true
go build -trimpath -ldflags='-s -w' -o "$bin" . >&2
echo "$want" > "$stamp"
echo "otelcol build: $(( $(date +%s) - start ))s" >&2
echo "$bin"
