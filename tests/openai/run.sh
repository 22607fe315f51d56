#!/usr/bin/env bash
# Runs the OpenAI/Anthropic compatibility suite: builds tuft, starts `tuft launch` on the
# built-in tiny model with two tenants, and drives it with the official `openai` and
# `anthropic` Python clients, unchanged (pinned in requirements.txt, installed into a venv
# by scripts/setup.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${TUFT_COMPAT_VENV:-$HOME/.cache/tuft/venv-compat}"
if [ ! -x "$venv/bin/python" ]; then
  echo "openai suite: no venv at $venv (run scripts/setup.sh)"; exit 1
fi
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  if [ "${KEEP_WORK:-}" = "" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT

go build -o "$work/tuft" "$root/cmd/tuft"
key_a="tml-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
key_b="tml-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
port="$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat > "$work/tuft_config.yaml" <<YAML
server: {host: 127.0.0.1, port: $port, log_level: info}
models:
  - {name: tuft/tiny, preset: tiny, max_context_length: 1024, max_lora_rank: 32}
auth:
  api_keys:
    - {tenant: alice, key_sha256: $("$work/tuft" key hash "$key_a")}
    - {tenant: bob, key_sha256: $("$work/tuft" key hash "$key_b")}
YAML
export TUFT_HOME="$work/home"
"$work/tuft" launch --config "$work/tuft_config.yaml" > "$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
  if curl -fsS "http://127.0.0.1:$port/api/v1/healthz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then echo "server exited:"; cat "$work/server.log"; exit 1; fi
  sleep 0.2
done
export TUFT_URL="http://127.0.0.1:$port" TUFT_KEY_A="$key_a" TUFT_KEY_B="$key_b" TUFT_MODEL="tuft/tiny"
rc=0
"$venv/bin/python" -m pytest -v -p no:cacheprovider "$here" || rc=$?
if [ $rc -ne 0 ]; then echo "---- server log (tail)"; tail -n 80 "$work/server.log"; fi
exit $rc
