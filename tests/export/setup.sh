#!/usr/bin/env bash
# Installs (or reuses) what the export suite's Python checks need: Debian's python3-torch
# with OpenBLAS (apt), and a venv at $TUFT_EXPORT_VENV (default ~/.cache/tuft/export) made
# from Debian's python3 with --system-site-packages, holding requirements.txt. The venv is
# rebuilt only when requirements.txt changes. Prints the venv's python.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${TUFT_EXPORT_VENV:-$HOME/.cache/tuft/export}"
py=/usr/bin/python3
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

need_apt=()
"$py" -c 'import torch' >/dev/null 2>&1 || need_apt+=(python3-torch)
[ -e /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 ] || [ -e /usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3 ] || need_apt+=(libopenblas0-pthread)
"$py" -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "export setup: apt-get install ${need_apt[*]}" >&2
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

want="$(sha256sum < "$here/requirements.txt" | cut -d' ' -f1)"
if ! [ -x "$venv/bin/python" ] || [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$want" ]; then
  echo "export setup: venv at $venv" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$py" -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt" >&2
  echo "$want" > "$venv/.stamp"
fi
echo "$venv/bin/python"
