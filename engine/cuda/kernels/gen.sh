#!/usr/bin/env bash
# Compiles kernels.cu to kernels.ptx (PTX for compute_70, which the driver JIT-compiles for
# any newer GPU) and kernels_sm80.ptx (compute_80, loaded on GPUs of 8.0 and later) with NVRTC from the pinned nvidia-cuda-nvrtc-cu12 wheel, then has ptxas
# from the nvidia-cuda-nvcc-cu12 wheel assemble the PTX for sm_70, sm_80 and sm_90, so a
# kernel that cannot be built for those GPUs fails here, not on a user's machine. Neither
# a GPU nor a C compiler is needed. The wheels go to a cached virtual environment.
#
#   gen.sh             regenerate kernels.ptx and kernels_sm80.ptx
#   gen.sh --check     fail if the committed kernels.ptx or kernels_sm80.ptx differs from what kernels.cu gives
#   gen.sh --install   only install the wheels (scripts/setup.sh)
#
# (The nvidia-cuda-nvcc-cu12 wheels carry ptxas but not nvcc itself; NVRTC compiles the
# same CUDA C without a host compiler or CUDA headers.)
set -euo pipefail
cd "$(dirname "$0")"

CUDA_WHEELS=12.0.140 # PTX ISA 8.0: loadable by drivers of CUDA 12.0 (525) and later
venv="${TUFT_CUDA_VENV:-$HOME/.cache/tuft/cuda-wheels-$CUDA_WHEELS}"
if [ ! -f "$venv/.installed" ]; then
  echo "gen.sh: installing nvidia-cuda-nvrtc-cu12 and nvidia-cuda-nvcc-cu12 $CUDA_WHEELS into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check \
    "nvidia-cuda-nvrtc-cu12==$CUDA_WHEELS" "nvidia-cuda-nvcc-cu12==$CUDA_WHEELS"
  touch "$venv/.installed"
fi
if [ "${1:-}" = "--install" ]; then exit 0; fi
nvidia="$(echo "$venv"/lib/python3*/site-packages/nvidia)"
check=()
if [ "${1:-}" = "--check" ]; then check=(-check); fi

# kernels.ptx (compute_70) for every GPU; kernels_sm80.ptx (compute_80: the attention
# kernels' tensor-core instructions) for compute capability 8.0 and later.
CGO_ENABLED=0 go run -tags cuda ./gen -nvrtc "$nvidia/cuda_nvrtc/lib" -src kernels.cu -out kernels.ptx "${check[@]}"
CGO_ENABLED=0 go run -tags cuda ./gen -nvrtc "$nvidia/cuda_nvrtc/lib" -src kernels.cu -arch compute_80 -out kernels_sm80.ptx "${check[@]}"
for sm in 70 80 90; do
  "$nvidia/cuda_nvcc/bin/ptxas" -arch="sm_$sm" -o /dev/null kernels.ptx
done
for sm in 80 90; do
  "$nvidia/cuda_nvcc/bin/ptxas" -arch="sm_$sm" -o /dev/null kernels_sm80.ptx
done
echo "gen.sh: ptxas assembles kernels.ptx for sm_70, sm_80 and sm_90, kernels_sm80.ptx for sm_80 and sm_90"
