#!/usr/bin/env bash
# Makes (or reuses) one Python venv per line of tests/conformance/versions.txt under
# $TUFT_SDK_CACHE (default ~/.cache/tuft/sdk), each with that Tinker SDK release and the
# suite's requirements. A venv is rebuilt only when its line or requirements.txt change.
# "latest" is resolved against PyPI on every run (offline: the cached one is kept); when it
# equals an exact version of the list, it is a link to that version's venv.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${TUFT_SDK_CACHE:-$HOME/.cache/tuft/sdk}"
mkdir -p "$cache"
req_sha="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"

pip_spec() { # a versions.txt line -> a pip requirement
  case "$1" in
    *.x) echo "tinker==${1%.x}.*" ;;
    *) echo "tinker==$1" ;;
  esac
}

latest_version() {
  python3 -m pip index versions tinker 2>/dev/null | sed -n 's/^tinker (\(.*\))$/\1/p' | head -n1
}

make_venv() { # name, pip requirement
  local dir="$cache/$1" want="$2 $req_sha"
  if [ -L "$dir" ]; then rm -f "$dir"; fi
  if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$want" ]; then return; fi
  echo "setup: venv $dir ($2)"
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check "$2" -r "$here/requirements.txt"
  echo "$want" > "$dir/.stamp"
}

while read -r line; do
  line="${line%%#*}"; line="$(echo "$line" | tr -d '[:space:]')"
  [ -z "$line" ] && continue
  if [ "$line" = latest ]; then
    v="$(latest_version || true)"
    if [ -z "$v" ]; then
      if [ -e "$cache/latest/bin/python" ]; then echo "setup: PyPI not reachable; keeping the cached latest SDK"; continue; fi
      echo "setup: cannot resolve the latest tinker release (PyPI not reachable)"; exit 1
    fi
    if grep -qx "$v" <(sed 's/#.*//; s/[[:space:]]//g' "$here/versions.txt"); then
      make_venv "$v" "tinker==$v"
      if [ "$(readlink "$cache/latest" 2>/dev/null)" != "$v" ]; then rm -rf "$cache/latest"; ln -s "$v" "$cache/latest"; fi
    else
      make_venv latest "tinker==$v"
    fi
    continue
  fi
  make_venv "$line" "$(pip_spec "$line")"
done < "$here/versions.txt"
