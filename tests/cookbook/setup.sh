#!/usr/bin/env bash
# Installs (or reuses) what the cookbook suite needs: Debian's python3-torch with OpenBLAS
# (apt, ~160 MB download), and a venv at $TUFT_COOKBOOK_VENV (default
# ~/.cache/tuft/cookbook) made from Debian's python3 with --system-site-packages, so it
# sees that torch, holding requirements.txt and, installed with --no-deps, the cookbook
# of cookbook.txt. The venv is rebuilt only when requirements.txt or cookbook.txt change.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${TUFT_COOKBOOK_VENV:-$HOME/.cache/tuft/cookbook}"
py=/usr/bin/python3
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

need_apt=()
"$py" -c 'import torch' >/dev/null 2>&1 || need_apt+=(python3-torch)
# Debian's torch calls BLAS through libblas.so.3; without OpenBLAS that is the slow
# reference implementation.
[ -e /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 ] || [ -e /usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3 ] || need_apt+=(libopenblas0-pthread)
"$py" -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

want="$(cat "$here/requirements.txt" "$here/cookbook.txt" | sha256sum | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
echo "setup: cookbook venv at $venv ($(tr -d '\n' < "$here/cookbook.txt"), $(grep -E '^tinker==' "$here/requirements.txt"))"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$py" -m venv --system-site-packages "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$here/cookbook.txt"
echo "$want" > "$venv/.stamp"
