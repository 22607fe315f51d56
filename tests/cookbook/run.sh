#!/usr/bin/env bash
# Runs tinker-cookbook's recipes against `tuft launch`, offline: builds tuft, writes the
# tiny preset model to a directory and serves it under that path (so the cookbook loads
# its tokenizer locally), starts the server, and runs the pytest suite in this directory
# with the venv made by tests/cookbook/setup.sh (scripts/setup.sh calls it).
#   TUFT_COOKBOOK_K=EXPR   pytest -k filter
#   KEEP_WORK=1            keep the work directory (recipe logs, metrics, server log)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${TUFT_COOKBOOK_VENV:-$HOME/.cache/tuft/cookbook}"
if [ ! -x "$venv/bin/python" ]; then
  echo "cookbook: no venv at $venv (run scripts/setup.sh)"; exit 1
fi
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  if [ "${KEEP_WORK:-}" = "" ]; then rm -rf "$work"; else echo "cookbook: work directory kept at $work"; fi
}
trap cleanup EXIT

go build -o "$work/tuft" "$root/cmd/tuft"
model="$work/models/tiny-chatml"
"$work/tuft" model init --preset tiny --out "$model" >/dev/null
key="tml-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
port="$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat > "$work/tuft_config.yaml" <<YAML
server: {host: 127.0.0.1, port: $port, log_level: info}
models:
  - {name: $model, path: $model, max_context_length: 2048, max_lora_rank: 32}
auth:
  api_keys:
    - {tenant: cookbook, key_sha256: $("$work/tuft" key hash "$key")}
YAML
export TUFT_HOME="$work/home"
"$work/tuft" launch --config "$work/tuft_config.yaml" > "$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
  if curl -fsS "http://127.0.0.1:$port/api/v1/healthz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then echo "server exited:"; cat "$work/server.log"; exit 1; fi
  sleep 0.2
done

export TINKER_BASE_URL="http://127.0.0.1:$port" TINKER_API_KEY="$key"
export TUFT_BIN="$work/tuft" TUFT_MODEL_PATH="$model" TUFT_WORK="$work" TUFT_SERVER_LOG="$work/server.log"
# Offline: no model hub, no dataset hub, an empty HF cache, and every other HTTP(S) request
# (the cookbook fetches a pricing table) sent to a closed loopback port instead of out.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME="$work/hf"
export http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost
export WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

args=(-p no:cacheprovider -rA "$here")
if [ -n "${TUFT_COOKBOOK_K:-}" ]; then args=(-k "$TUFT_COOKBOOK_K" "${args[@]}"); fi
rc=0
(cd "$work" && "$venv/bin/python" -m pytest "${args[@]}") || rc=$?
if [ $rc -ne 0 ]; then echo "---- server log (tail, without client telemetry events)"; grep -v 'msg="client event' "$work/server.log" | tail -n 40; fi
exit $rc
