#!/usr/bin/env bash
# Installs what the full test suite needs on a fresh Debian machine: Go module
# dependencies, a Redis server, Python's venv module and one venv per Tinker SDK release
# of the conformance matrix (tests/conformance/versions.txt). Safe to run repeatedly;
# each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
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

if [ -x tests/cookbook/setup.sh ]; then
  echo "setup: tinker-cookbook venv with Debian's torch (tests/cookbook, cached)"
  bash tests/cookbook/setup.sh
fi

if [ -x tools/otelcol/build.sh ]; then
  echo "setup: OpenTelemetry Collector (cached)"
  tools/otelcol/build.sh
fi
echo "setup: done"
