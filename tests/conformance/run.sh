#!/usr/bin/env bash
# Runs the Tinker SDK conformance suite as a version matrix: builds tuft, starts `tuft
# launch` on the built-in tiny model with two tenants, and drives it with the official
# `tinker` package of every release in versions.txt (one venv each, made by
# scripts/setup.sh), then prints the matrix (scenario × release).
#   TUFT_SDK=0.38.0          run one line of versions.txt only
#   TUFT_COMPAT_DOC=FILE     also write the matrix into FILE (docs/compatibility.md)
#   TUFT_PYTEST_ARGS="-k x"  extra pytest arguments (a subset of scenarios)
# On a GPU: TUFT_BUILD_TAGS=cuda TUFT_DEVICE=cuda bash tests/conformance/run.sh
# (TUFT_CUDA_LIB_DIRS adds library directories, e.g. the CPU emulation of engine/cuda/emu).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${TUFT_SDK_CACHE:-$HOME/.cache/tuft/sdk}"
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  if [ "${KEEP_WORK:-}" = "" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT

lines=()
while read -r line; do
  line="${line%%#*}"; line="$(echo "$line" | tr -d '[:space:]')"
  [ -z "$line" ] && continue
  if [ -n "${TUFT_SDK:-}" ] && [ "$line" != "$TUFT_SDK" ]; then continue; fi
  if [ ! -x "$cache/$line/bin/python" ]; then
    echo "conformance: no venv for tinker $line at $cache/$line (run scripts/setup.sh)"; exit 1
  fi
  lines+=("$line")
done < "$here/versions.txt"
if [ ${#lines[@]} -eq 0 ]; then echo "conformance: no SDK release selected"; exit 1; fi
py="$cache/${lines[0]}/bin/python"

go build -tags "${TUFT_BUILD_TAGS:-}" -o "$work/tuft" "$root/cmd/tuft"
key_a="tml-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
key_b="tml-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
port="$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat > "$work/tuft_config.yaml" <<YAML
server: {host: 127.0.0.1, port: $port, log_level: info}
sessions: {record_spans: true}
models:
  - {name: tuft/tiny, preset: tiny, max_context_length: 1024, max_lora_rank: 32}
auth:
  api_keys:
    - {tenant: alice, key_sha256: $("$work/tuft" key hash "$key_a")}
    - {tenant: bob, key_sha256: $("$work/tuft" key hash "$key_b")}
YAML
if [ -n "${TUFT_CUDA_LIB_DIRS:-}" ]; then
  echo "engine: {cuda_lib_dirs: [\"${TUFT_CUDA_LIB_DIRS//:/\", \"}\"]}" >> "$work/tuft_config.yaml"
fi
export TUFT_HOME="$work/home"
"$work/tuft" launch --config "$work/tuft_config.yaml" > "$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
  if curl -fsS "http://127.0.0.1:$port/api/v1/healthz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then echo "server exited:"; cat "$work/server.log"; exit 1; fi
  sleep 0.2
done
export TINKER_BASE_URL="http://127.0.0.1:$port" TUFT_KEY_A="$key_a" TUFT_KEY_B="$key_b" TUFT_MODEL="tuft/tiny"
export TUFT_MODEL_DIR="$TUFT_HOME/models/tiny"
export TINKER_TELEMETRY=1

rc=0
declare -A seen=()
latest=""
mkdir -p "$work/results"
for line in "${lines[@]}"; do
  dir="$(readlink -f "$cache/$line")"
  version="$("$dir/bin/python" -c 'import tinker; print(tinker.__version__)')"
  if [ "$line" = latest ]; then latest="$version"; fi
  if [ -n "${seen[$dir]:-}" ]; then continue; fi
  seen[$dir]=1
  echo "== tinker $version ($line)"
  # A hung scenario must not hang CI: each release gets at most 10 minutes.
  TUFT_RESULTS="$work/results/$version.json" timeout -k 10 600 "$dir/bin/python" -m pytest -v -p no:cacheprovider ${TUFT_PYTEST_ARGS:-} "$here" || rc=$?
  if [ ! -s "$work/results/$version.json" ]; then
    echo "conformance: tinker $version wrote no results (hung or crashed)"
    printf '{"sdk_version": "%s", "results": []}\n' "$version" > "$work/results/$version.json"; rc=1
  fi
done
echo
echo "== conformance matrix (P passed, F failed, - not applicable to that release)"
args=("$work/results/"*.json)
if [ -n "$latest" ]; then args=(--latest "$latest" "${args[@]}"); fi
if [ -n "${TUFT_COMPAT_DOC:-}" ]; then args=(--write "$TUFT_COMPAT_DOC" "${args[@]}"); fi
python3 "$here/matrix.py" "${args[@]}" || rc=1
grep -m1 'engine device' "$work/server.log" || true
if [ $rc -ne 0 ]; then echo "---- server log (tail)"; tail -n 80 "$work/server.log"; fi
exit $rc
