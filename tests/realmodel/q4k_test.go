package realmodel_test

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine"
)

// loadIn loads the GGUF at env's path on a CPU holding weights in f.
func loadIn(t *testing.T, env string, f engine.WeightFormat) *engine.Model {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		t.Skipf("%s is not set (run.sh writes it)", env)
	}
	d, _, err := engine.OpenDevice("cpu", engine.DeviceOptions{CPUWeightFormat: f})
	if err != nil {
		t.Fatal(err)
	}
	m, err := engine.Load(path, "smollm2-"+f.String(), engine.OnDevice(d))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// greedyFrance is greedyParis for llama.cpp's Q4_K_M file, which answers the capital
// question wrongly in llama.cpp too ("L'Étoile (The Lion) is the capital of France.",
// llama-cpp-python 0.3.36, greedy): the answer must still be about France.
func greedyFrance(t *testing.T, m *engine.Model) {
	t.Helper()
	if answer := greedyAnswer(t, m); !strings.Contains(answer, "France") {
		t.Errorf("answer %q is not about France", answer)
	}
}

// logVsF32 logs how far m's logprobs are from the engine's in f32 on the shipped file.
func logVsF32(t *testing.T, m *engine.Model, what string) {
	t.Helper()
	got, f32 := promptLogprobs(t, m, llamaCppText), promptLogprobs(t, model(t), llamaCppText)
	var sum, worst float64
	for i := 1; i < len(f32); i++ {
		d := math.Abs(float64(got[i] - f32[i]))
		sum, worst = sum+d, max(worst, d)
	}
	t.Logf("%s vs the engine in f32: mean |Δlogprob| %.4f, max %.4f nats", what, sum/float64(len(f32)-1), worst)
}

// TestQ4KM: llama.cpp's own Q4_K_M quantisation of SmolLM2 (dequant_gguf.py q4_k_m on
// the F32 copy: Q4_K/Q6_K for the 1536-long ffn_down rows, Q5_0/Q8_0 where rows of 576
// are not whole 256-blocks), and the engine in q4_k.
//
//   - file: the engine in q4_k on that file keeps its blocks, so both sides compute with
//     the same weights; its logprobs are within 0.1 mean, 0.6 max nats of llama.cpp's on
//     the same file with the same most likely token at 90% of positions (llama.cpp's
//     8-bit activations are the difference; SmolLM2 in Q4_K_M has near ties), and its
//     answer is llama.cpp's kind of wrong (greedyFrance).
//   - ours: the engine in q4_k on the F32 copy quantises itself (a model loaded from
//     safetensors does the same) as llama.cpp's Q4_K_M does: Q4_K where rows are whole
//     super-blocks, Q5_0 else, and for the attn_v and ffn_down of the layers
//     use_more_bits picks (14 of 30) Q6_K, or Q8_0 where rows are not whole
//     super-blocks; the embedding Q8_0 (llama.cpp's output rule). Every one of the 210
//     layer matrices is in llama.cpp's format with llama.cpp's bytes (the quantisers are
//     ggml's), so it is held to the file's tolerances and answer. (Before the Q6_K
//     quantiser the 28 raised matrices stayed Q4_K/Q5_0: 0.159 mean, 1.078 max nats,
//     45/51 against llama.cpp; docs/models.md.)
func TestQ4KM(t *testing.T) {
	ref := llamaCpp(t, "TUFT_REALMODEL_LLAMACPP_Q4_K_M")
	file := loadIn(t, "TUFT_REALMODEL_GGUF_Q4_K_M", engine.WeightsQ4_K)
	t.Run("file", func(t *testing.T) {
		greedyFrance(t, file)
		checkLogprobs(t, file, ref, 0.1, 0.6, 0.90)
		logVsF32(t, file, "q4_k on the Q4_K_M file")
	})
	t.Run("ours", func(t *testing.T) {
		ours := loadIn(t, "TUFT_REALMODEL_GGUF_F32", engine.WeightsQ4_K)
		greedyFrance(t, ours)
		checkLogprobs(t, ours, ref, 0.1, 0.6, 0.90)
		logVsF32(t, ours, "q4_k quantised by the engine")
		same, formats := 0, map[string]int{}
		for i := 0; i < ours.Cfg.Layers; i++ {
			a, b := ours.LayerMatrices(i), file.LayerMatrices(i)
			for name, x := range a {
				y := b[name]
				formats[name+":"+x.Format.String()+"/"+y.Format.String()]++
				if x.Format != y.Format {
					continue
				}
				if !bytes.Equal(x.Blocks(), y.Blocks()) {
					t.Errorf("layer %d %s: the engine's %s blocks differ from llama.cpp's", i, name, x.Format)
				}
				same++
			}
		}
		t.Logf("matrices in the same format on both (engine/llama.cpp formats: %v): %d, every one byte for byte", formats, same)
		if want := 7 * ours.Cfg.Layers; same != want {
			t.Errorf("%d of %d layer matrices share llama.cpp's format", same, want)
		}
	})
}
