// Package cuda is the engine's NVIDIA GPU device: an implementation of
// device.Device[float32] over the CUDA driver API and cuBLAS, without cgo.
//
// The libraries are loaded at run time (github.com/ebitengine/purego): libcuda.so.1 from
// the driver, cuBLAS (libcublas, libcublasLt) from the directories Options.LibDirs name,
// $CUDA_HOME, the nvidia-cublas-cu12 Python wheel's directory, or the system's. So
// building needs no CUDA toolkit and no C compiler; running needs the driver and cuBLAS.
//
// Kernels cuBLAS lacks are CUDA C in kernels/kernels.cu, compiled to PTX by
// kernels/gen.sh (NVRTC from the nvidia-cuda-nvrtc-cu12 wheel) and embedded; the driver
// JIT-compiles the PTX for the GPU at hand (and caches the result).
//
// Kernels are compiled twice: for compute_70 (kernels.ptx, any GPU) and compute_80
// (kernels_sm80.ptx, loaded on 8.0 and later), the latter holding the tensor-core
// instructions of the attention kernels.
//
// Precision: frozen base weights are stored as bfloat16 on GPUs of compute capability 8.0
// and later (the activation operand of each product with them is rounded to bfloat16 too,
// accumulation is float32); LoRA weights, gradients, optimizer state and all other
// activations are float32. There, attention is tiled (FlashAttention-2: flash_* in
// kernels.cu) with its products on the tensor cores (bfloat16 in, float32 accumulate,
// float32 softmax) and keeps each row's log-sum-exp rather than the probabilities
// (device.StatsKeeper). Options.FP32Weights keeps the weights, and attention, in float32.
//
// Loading libraries with purego links the C library's loader into the program, so the
// device is only in builds with the cuda build tag (`go build -tags cuda`, still
// CGO_ENABLED=0); the default build stays a static binary, and there Open reports that
// CUDA support was not built in.
package cuda
