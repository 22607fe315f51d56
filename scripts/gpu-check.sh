#!/usr/bin/env bash
# The GPU check of docs/gpu.md, sized for a short GPU loan (≤ 6 minutes): run from the
# repository root on a GPU machine without network, from the binaries that
# scripts/gpu-build.sh put in bin/. It writes every figure and log under OUT:
#
#   bash scripts/gpu-check.sh OUT          # on the GPU machine
#   bash scripts/gpu-check.sh --dry OUT    # anywhere: the CPU-possible parts, small models
#
# Steps (each under its own time limit; a failed step is recorded and the next runs):
#   1. the GPU tests (engine and engine/cuda test binaries, TUFT_REQUIRE_GPU=1), then
#      attention alone: engine/cuda's BenchmarkAttention against torch SDPA (same shapes);
#      the loss head alone: BenchmarkLossHead, fused against full logits (time, device MiB);
#      batch-1 decoding with decode steps as CUDA graphs and without (BenchmarkGPUDecodeGraphs);
#   2. qwen2.5-0.5b-shape: tuft-bench engine against PyTorch+PEFT, train 512 tokens, sample 1/16/64,
#      with the multi-adapter training figure (16 adapters × 32 tokens in one step against
#      one adapter × 512); then tuft-bench sampling: 16 one-sample requests over 16 adapters
#      and 16 tenants against one 16-sample request (the grouped LoRA products, issue 25);
#   3. llama2-7b-shape: model init (timed), tuft-bench load (load time, host peak RSS),
#      tuft-bench engine against PyTorch+PEFT, train 2048 tokens, sample 1/16, and train
#      8192 tokens; batch-1 decoding of it with CUDA graphs and without;
#   4. the server on the GPU (tuft launch) with the Go SDK's SFT example;
#   5. profiles (ncu, each kernel's time): a 7B training step, and 7B decoding steps;
#      and the attention kernels' stall reasons and throughputs (ncu sections).
# Where a PyTorch with CUDA, transformers and peft import (python3, or $PYTHON), the
# benches compare against them; the GPU machine has torch 2.11, transformers and peft.
set -uo pipefail
dry=0
if [ "${1:-}" = "--dry" ]; then dry=1; shift; fi
out="${1:?usage: gpu-check.sh [--dry] OUT}"
cd "$(dirname "$0")/.."
root=$(pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin="$root/bin"
for b in tuft tuft-bench example-sft engine-cuda.test cuda.test; do
  [ -x "$bin/$b" ] || { echo "gpu-check: $bin/$b missing: run scripts/gpu-build.sh first" >&2; exit 2; }
done
start=$(date +%s)
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
# step NAME SECONDS CMD…: run CMD with a time limit; its stdout (the JSON of a bench) in
# OUT/NAME.out, its stderr in OUT/NAME.log.
# The whole check stays within GPU_CHECK_BUDGET seconds (360): a step gets at most what is
# left, and is skipped when less than 15 s are.
budget=${GPU_CHECK_BUDGET:-360}
step() {
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s) left=$(( budget - ($(date +%s) - start) ))
  if [ "$left" -lt 15 ]; then note "$(printf '%-22s skipped: the %ss budget is spent' "$name" "$budget")"; return 124; fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.out" 2>"$out/$name.log"
  local rc=$?
  note "$(printf '%-22s rc=%-3s %4ss (limit %ss)' "$name" "$rc" $(( $(date +%s) - t0 )) "$limit")"
  return $rc
}

device=cuda small=qwen2.5-0.5b-shape big=llama2-7b-shape
big_tokens=2048 torch=auto
if [ "$dry" = 1 ]; then
  device=cpu small=tiny big=smollm2-135m-shape big_tokens=64 torch=off
fi
python=${PYTHON:-python3}
PATH=$PATH:/usr/local/cuda/bin # where the CUDA image keeps ncu


{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(cat "$bin/COMMIT" 2>/dev/null)"
  echo "host: $(hostname) cpus=$(nproc) load=$(cut -d' ' -f1-3 /proc/loadavg)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 || echo "nvidia-smi: none"
  "$python" -c 'import torch, transformers, peft; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "peft", peft.__version__)' 2>&1 | tail -1
  command -v nsys ncu 2>&1
} >"$out/machine.txt"
note "gpu-check $( [ "$dry" = 1 ] && echo '(dry: CPU parts, small models)') → $out"

# 1. GPU tests (on a machine without a GPU they skip, unless TUFT_CUDA_LIB_DIRS points at
# the CPU emulation; a dry run then runs only the load tests).
req=1 run=GPU # the engine's CPU tests run in CI
if [ "$dry" = 1 ]; then req= run='TestGPUStreamedLoad|TestGPULoadPeakRSS'; fi
(cd engine && TUFT_REQUIRE_GPU=$req step gpu-tests-engine 150 "$bin/engine-cuda.test" -test.run "$run" -test.count=1 -test.v)
(cd engine/cuda && TUFT_REQUIRE_GPU=$req step gpu-tests-cuda 60 "$bin/cuda.test" -test.count=1)

# 1b. Attention alone: the tiled kernels (engine/cuda BenchmarkAttention) and torch's
# scaled_dot_product_attention (tools/torchref/bench_attention.py, which also checks
# bfloat16 SDPA against float64 within the tolerance the kernels are held to), same shapes.
if [ "$dry" = 1 ]; then
  note "attn-bench             skipped (dry run: T=2048 takes minutes on the emulation)"
else
  (cd engine/cuda && step attn-bench 60 "$bin/cuda.test" -test.run '^$' -test.bench BenchmarkAttention -test.benchtime 10x)
  if [ "$torch" != off ]; then step attn-torch 60 "$python" tools/torchref/bench_attention.py --iters 10; fi
fi

# 1c. The loss head alone at the 7B shape (T=2048, V=32,000): the fused head against the
# full logits it replaced, time and device memory (engine/cuda BenchmarkLossHead, peak-MiB).
if [ "$dry" = 1 ]; then
  note "head-bench             skipped (dry run: the 7B shape takes minutes on the emulation)"
else
  (cd engine/cuda && step head-bench 60 "$bin/cuda.test" -test.run '^$' -test.bench 'BenchmarkLossHead/llama7b' -test.benchtime 5x)
fi

# 1d. Batch-1 decoding of smollm2-135m-shape with decode steps as CUDA graphs and without
# (engine BenchmarkGPUDecodeGraphs: tok/s of each; engine.cuda_graphs). The dry run times
# the tiny preset for a few tokens on the emulation, when TUFT_CUDA_LIB_DIRS points at it.
if [ "$dry" = 1 ]; then
  (cd engine && TUFT_DECODE_BENCH_PRESET=tiny TUFT_DECODE_BENCH_TOKENS=4 step decode-graphs 120 "$bin/engine-cuda.test" \
    -test.run '^$' -test.bench BenchmarkGPUDecodeGraphs -test.benchtime 1x)
else
  (cd engine && step decode-graphs 60 "$bin/engine-cuda.test" -test.run '^$' -test.bench BenchmarkGPUDecodeGraphs -test.benchtime 5x)
fi

# 2. The small model against PyTorch+PEFT.
step bench-small 90 "$bin/tuft-bench" engine --device "$device" --preset "$small" --tokens 512 --steps 3 \
  --adapters 16 --sample-tokens 64 --batches 1,16,64 --torch "$torch" --python "$python" --json
# Multi-adapter sampling on the same device (the PyTorch sampling reference is CPU-only).
step sampling-multi 60 "$bin/tuft-bench" sampling --device "$device" --preset "$small" --requests 16 --adapters 16 \
  --tenants 16 --sample-tokens 32 --rounds 3 --torch off --json

# 3. The 7B shape: write it (timed), load it alone (seconds, host peak RSS), bench it.
# In memory when there is room (the GPU machine has 128 GiB): the disk's write speed is
# not what this measures, and a load from tmpfs is a load from the page cache.
tmp=${TMPDIR:-/tmp}
if [ "$dry" = 0 ] && [ "$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2 {print $4}')" -gt $((24 << 20)) ] 2>/dev/null; then tmp=/dev/shm; fi
models=$(mktemp -d "$tmp/gpu-check-XXXXXX")
trap 'rm -rf "$models"' EXIT
step init-big 90 "$bin/tuft" model init --preset "$big" --out "$models/big"
step load-big 60 "$bin/tuft-bench" load --model "$models/big" --device "$device" --json
step bench-big 150 "$bin/tuft-bench" engine --device "$device" --model "$models/big" --tokens "$big_tokens" --steps 2 \
  --adapters 0 --sample-tokens 32 --batches 1,16 --torch "$torch" --python "$python" --json
# Steps of 8192 tokens (issue 25 item 1; 256 in the dry run), sampling left to bench-big.
step bench-big-8k 120 "$bin/tuft-bench" engine --device "$device" --model "$models/big" --tokens $(( big_tokens * 4 )) --steps 2 \
  --adapters 0 --sample-tokens 1 --batches 1 --torch "$torch" --python "$python" --json
# Batch-1 decoding of the big model, base weights only: graphs off, on, and on with
# cuBLAS for the one-row products instead of gemv_bf16 (engine.cuda_gemv).
(cd engine && TUFT_DECODE_BENCH_MODEL="$models/big" TUFT_DECODE_BENCH_TOKENS=$( [ "$dry" = 1 ] && echo 2 || echo 32 ) \
  step decode-big 90 "$bin/engine-cuda.test" -test.run '^$' -test.bench BenchmarkGPUDecodeGraphs -test.benchtime 2x)

# 4. The server on the GPU with the Go SDK's SFT example (the built-in tiny model).
port=$(( 20000 + RANDOM % 20000 ))
export TUFT_HOME="$out/server-home" TUFT_PORT=$port TUFT_DEVICE=$device TUFT_URL="http://127.0.0.1:$port"
mkdir -p "$TUFT_HOME"
"$bin/tuft" launch >"$out/server.log" 2>&1 &
server=$!
for _ in $(seq 1 150); do
  if command -v curl >/dev/null; then curl -fsS "$TUFT_URL/api/v1/healthz" >/dev/null 2>&1 && break
  else (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; fi
  sleep 0.2
done
step sdk-sft 90 "$bin/example-sft" --steps 20
kill "$server" 2>/dev/null; wait "$server" 2>/dev/null
grep -m1 -i "device" "$out/server.log" >>"$out/sdk-sft.log"
unset TUFT_HOME TUFT_PORT TUFT_DEVICE TUFT_URL

# 5. Profiles: each kernel's time (ncu, one metric: one pass, no replay; the clocks as the
# card has them) over the first 7B training step (its kernels from the first: ~3,600
# launches, adamw_multi last), and over a prompt step and two decoding steps of the 7B at
# batch 1 without graphs. Sum them by kernel: tools/ncu_summary.py OUT/profile-*.csv.
prof=("$bin/tuft-bench" engine --device "$device" --model "$models/big" --tokens "$big_tokens" --steps 1 --adapters 0 --sample-tokens 1 --batches 1 --torch off --json)
ncu=(ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw)
if [ "$dry" = 1 ]; then
  note "profile                skipped (dry run)"
elif command -v ncu >/dev/null; then
  step profile-big 120 "${ncu[@]}" --launch-count 3800 --log-file "$out/profile-big.csv" "${prof[@]}"
  (cd engine && TUFT_DECODE_BENCH_MODEL="$models/big" TUFT_DECODE_BENCH_TOKENS=2 step profile-decode 90 "${ncu[@]}" \
    --launch-count 1500 --log-file "$out/profile-decode.csv" "$bin/engine-cuda.test" -test.run '^$' \
    -test.bench 'BenchmarkGPUDecodeGraphs/.*/.*/graphs=false/gemv=true' -test.benchtime 1x)
  # Why the tiled attention runs far below the tensor cores' rate: stall reasons, issue
  # and memory figures of one forward, dQ and dK/dV kernel at the 7B layer's shape.
  (cd engine/cuda && step profile-attn 90 ncu --clock-control none --kernel-name regex:flash_ --launch-count 3 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section MemoryWorkloadAnalysis --section LaunchStats "$bin/cuda.test" -test.run '^$' \
    -test.bench 'BenchmarkAttention/llama7b-T2048/fwd\+bwd' -test.benchtime 1x)
else
  note "profile                skipped: ncu not on PATH"
fi

note "total $(( $(date +%s) - start ))s"
