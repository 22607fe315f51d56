//go:build cuda

package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tuft-go/tuft/engine/cuda"
)

// The engine's numerical checks on a GPU (go test -tags cuda). They skip where no GPU can
// be opened, unless TUFT_REQUIRE_GPU is set. TUFT_CUDA_LIB_DIRS adds library directories
// (the CPU emulation of cuda/emu runs them without a GPU).
//
// Tolerances, stated before a GPU run confirmed them: with float32 weights the GPU
// computes what the CPU computes up to summation order (cuBLAS without TF32), so the CPU's
// bounds hold with a margin of 10. With bfloat16 weights every product with a base weight
// rounds both operands to 8 significant bits (relative error 2⁻⁹ each), which the tiny
// preset's 4 layers turn into errors of about 1e-3 in logprobs; the bounds allow 10×
// that. AdamW's first step moves each weight by ±lr·sign(g), so a gradient component
// near zero whose sign the bfloat16 error flips moves that weight by 2·lr: the bound
// on the updated weights allows for a few such flips. Dimuon's momentum is linear in the
// gradients and its update, on the CPU emulation, was as close to the reference as the
// gradients were (2e-2 with bfloat16 weights), so it gets the gradients' bounds; an
// unrelated direction of the same norm would be about 1.4 away.

func openGPU(t *testing.T, fp32 bool) Device {
	t.Helper()
	// Decode steps as graphs, as engine.cuda_graphs has them by default.
	return openGPUGraphs(t, fp32, true)
}

// openGPUGraphs is openGPU with decode-step graphs on or off.
func openGPUGraphs(t *testing.T, fp32, graphs bool) Device {
	t.Helper()
	d, err := cuda.OpenDevice(cuda.Options{FP32Weights: fp32, LibDirs: filepath.SplitList(os.Getenv("TUFT_CUDA_LIB_DIRS")),
		Graphs: graphs, GraphLimit: 32})
	if err != nil {
		if os.Getenv("TUFT_REQUIRE_GPU") != "" {
			t.Fatalf("TUFT_REQUIRE_GPU is set and no GPU opened: %v", err)
		}
		t.Skipf("no GPU: %v", err)
	}
	t.Logf("device: %s", d.Name())
	return d
}

var gpuModes = []struct {
	name string
	fp32 bool
	ref  torchTol
	kv   float64 // KV-cache decode vs full forward, per logprob
	out  float64 // multi-LoRA batch vs separate: logprobs and losses
	grad float64 // multi-LoRA batch vs separate: gradients
}{
	{"fp32-weights", true, torchTol{logprobs: 1e-4, loss: 1e-3, grad: 1e-2, adamw: 1e-4, dimuon: 1e-2}, 1e-3, 1e-4, 1e-3},
	{"bf16-weights", false, torchTol{logprobs: 2e-2, loss: 2e-2, grad: 1e-1, adamw: 1e-2, dimuon: 1e-1}, 2e-2, 1e-3, 1e-2},
}

func TestGPUMatchesPyTorchReference(t *testing.T) {
	for _, mode := range gpuModes {
		t.Run(mode.name, func(t *testing.T) {
			checkTorchRef(t, tinyModel(t, OnDevice(openGPU(t, mode.fp32))), mode.ref)
		})
	}
}

// TestGPUDimuonStateRoundTripContinuesBitExact: Dimuon's host arithmetic round-trips the
// adapter through the device, and a checkpoint continues bit-exactly there too.
func TestGPUDimuonStateRoundTripContinuesBitExact(t *testing.T) {
	for _, mode := range gpuModes {
		t.Run(mode.name, func(t *testing.T) {
			checkDimuonSaveLoad(t, tinyModel(t, OnDevice(openGPU(t, mode.fp32))))
		})
	}
}

func TestGPUKVCacheDecodingEqualsFullForward(t *testing.T) {
	for _, mode := range gpuModes {
		t.Run(mode.name, func(t *testing.T) { checkKVDecode(t, openGPU(t, mode.fp32), mode.kv) })
	}
}

func TestGPUSampledLogprobsEqualTeacherForced(t *testing.T) {
	for _, mode := range gpuModes {
		t.Run(mode.name, func(t *testing.T) {
			checkSampledLogprobs(t, tinyModel(t, OnDevice(openGPU(t, mode.fp32))), mode.kv)
		})
	}
}

// TestGPUSampleOutputsMatchFullSoftmax: the newer sampling outputs (top-k of sampled
// tokens, target prompt logprobs, alternative prompt tokens) on the device.
func TestGPUSampleOutputsMatchFullSoftmax(t *testing.T) {
	for _, mode := range gpuModes {
		t.Run(mode.name, func(t *testing.T) {
			checkSampleOutputs(t, tinyModel(t, OnDevice(openGPU(t, mode.fp32))), mode.kv)
		})
	}
}

func TestGPUMultiLoRABatchEqualsSeparatePasses(t *testing.T) {
	for _, mode := range gpuModes {
		t.Run(mode.name, func(t *testing.T) {
			checkMultiLoRA(t, tinyModel(t, OnDevice(openGPU(t, mode.fp32))), mode.out, mode.grad)
		})
	}
}

// Training continues bit for bit after a save and load on the GPU too.
func TestGPUTrainingLowersLossAndSaveLoadContinuesExactly(t *testing.T) {
	checkTrainSaveLoad(t, tinyModel(t, OnDevice(openGPU(t, false))))
}

// Training steps and sample requests give back all the device memory they take: what is
// in use after a few rounds is what was in use after the first.
func TestGPUMemoryDoesNotGrow(t *testing.T) {
	dev := openGPU(t, false)
	st, ok := dev.(interface{ Stats() cuda.Stats })
	if !ok {
		t.Fatalf("%T has no Stats", dev)
	}
	m := tinyModel(t, OnDevice(dev))
	a, err := m.NewAdapter(LoraConfig{Rank: 4, TrainAttn: true, TrainMLP: true})
	if err != nil {
		t.Fatal(err)
	}
	req := ceRequest([]int32{3, 4, 5, 6, 7, 8, 9})
	seed := int64(1)
	round := func() {
		if _, err := m.ForwardBackward(context.Background(), a, req); err != nil {
			t.Fatal(err)
		}
		if _, err := m.OptimStep(context.Background(), a, AdamParams{LearningRate: 1e-3, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Sample(context.Background(), &a.W, SampleRequest{Prompt: []int32{1, 2, 3}, NumSamples: 3, PromptLogprobs: true,
			TopKPromptLogprobs: 2, Params: SampleParams{MaxTokens: 5, Temperature: 1, TopK: 20, TopP: 0.9, Seed: &seed}}); err != nil {
			t.Fatal(err)
		}
	}
	round()
	before := st.Stats().InUse
	for i := 0; i < 3; i++ {
		round()
	}
	if after := st.Stats().InUse; after != before {
		t.Fatalf("device memory in use grew from %d to %d bytes over 3 rounds", before, after)
	}
}
