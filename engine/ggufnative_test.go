package engine

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/tuft-go/tuft/engine/gguf"
	"github.com/tuft-go/tuft/engine/kern"
)

// TestGGUFKeepsBlocksInQ4K: on a CPU holding weights in q4_k, a GGUF file's Q4_K, Q5_0,
// Q8_0 and Q4_1 matrices keep the file's blocks (llama's q rows reordered, each row's
// blocks moving with it) and widen to exactly what the f32 load of the same file holds,
// while its F32 matrices are quantised into q4_k; the model computes logprobs near the
// f32 load's. In another format the blocks are not kept.
func TestGGUFKeepsBlocksInQ4K(t *testing.T) {
	src, tj := tinyGGUFSource(t, "llama")
	g := ggufFromModel(t, src, tj)
	// Store some matrices as a Q4_K_M file would: blocks made by the engine's quantisers
	// from the tensors the file holds (q already in llama.cpp's row order).
	types := map[string]kern.WeightFormat{"blk.0.attn_q.weight": kern.Q4_K, "blk.0.attn_k.weight": kern.Q5_0,
		"blk.1.ffn_down.weight": kern.Q8_0, "blk.1.ffn_up.weight": kern.Q4_1}
	ggufType := map[kern.WeightFormat]gguf.TensorType{kern.Q4_K: gguf.Q4_K, kern.Q5_0: gguf.Q5_0, kern.Q8_0: gguf.Q8_0, kern.Q4_1: gguf.Q4_1}
	fileBlocks := map[string][]byte{}
	for i := range g.tensors {
		tt := &g.tensors[i]
		f, ok := types[tt.name]
		if !ok {
			continue
		}
		rows, cols := int(tt.dims[1]), int(tt.dims[0])
		fz := kern.NewFrozen(tt.data, rows, cols, f)
		if fz.Format != f {
			t.Fatalf("%s: stored as %s", tt.name, fz.Format)
		}
		tt.typ, tt.raw = ggufType[f], fz.Blocks()
		fileBlocks[tt.name] = fz.Blocks()
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, g.bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	f32, err := Load(path, "f32")
	if err != nil {
		t.Fatal(err)
	}
	dev, _, err := OpenDevice("cpu", DeviceOptions{CPUWeightFormat: WeightsQ4_K})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(path, "q4k", OnDevice(dev))
	if err != nil {
		t.Fatal(err)
	}
	c := m.Cfg
	l0, l1 := m.dw.Layers[0], m.dw.Layers[1]
	for _, x := range []struct {
		name string
		got  *kern.Frozen
		want kern.WeightFormat
		f32  []float32
		kept bool
	}{
		{"blk.0.attn_q.weight", l0.Wq.Frozen(), kern.Q4_K, f32.W.Layers[0].Wq, true},
		{"blk.0.attn_k.weight", l0.Wk.Frozen(), kern.Q5_0, f32.W.Layers[0].Wk, true},
		{"blk.1.ffn_down.weight", l1.Wdown.Frozen(), kern.Q8_0, f32.W.Layers[1].Wdown, true},
		{"blk.1.ffn_up.weight", l1.Wup.Frozen(), kern.Q4_1, f32.W.Layers[1].Wup, true},
		{"blk.0.attn_v.weight (F32 in the file)", l0.Wv.Frozen(), kern.Q4_K, nil, false},
		{"blk.1.ffn_gate.weight (F32 in the file)", l1.Wgate.Frozen(), kern.Q4_K, nil, false},
	} {
		if x.got == nil || x.got.Format != x.want {
			t.Fatalf("%s: stored as %v, want %s", x.name, x.got, x.want)
		}
		if !x.kept {
			continue
		}
		row := make([]float32, x.got.Cols)
		for r := 0; r < x.got.Rows; r++ {
			x.got.Row(row, r)
			for j, v := range row {
				if w := x.f32[r*x.got.Cols+j]; math.Float32bits(v) != math.Float32bits(w) {
					t.Fatalf("%s row %d col %d: %v kept, %v in the f32 load", x.name, r, j, v, w)
				}
			}
		}
		if x.name == "blk.0.attn_q.weight" || x.name == "blk.0.attn_k.weight" {
			// llama's q and k rows are reordered: the bytes are the file's, rows permuted
			// (the widened rows equal the f32 load's, checked above).
			if bytes.Equal(x.got.Blocks(), fileBlocks[x.name]) {
				t.Errorf("%s: rows not reordered", x.name)
			}
		} else if !bytes.Equal(x.got.Blocks(), fileBlocks[x.name]) {
			t.Errorf("%s: blocks differ from the file's", x.name)
		}
	}
	if c.Hidden%kern.QKBlock != 0 {
		t.Fatalf("tiny's hidden %d is not whole super-blocks", c.Hidden)
	}
	// The model computes near its f32 load (q4_k's storage error on the F32 matrices).
	ids := []int32{1, 5, 9, 33, 70, 100, 7, 3}
	want := promptLP(t, f32, ids)
	got := promptLP(t, m, ids)
	for i := 1; i < len(ids); i++ {
		if d := math.Abs(float64(got[i] - want[i])); d > 0.5 || math.IsNaN(d) {
			t.Errorf("token %d: logprob %v in q4_k, %v in f32", i, got[i], want[i])
		}
	}
	// Another format re-quantises: q4_1 holds no Q4_K or Q5_0 matrix.
	dev41, _, err := OpenDevice("cpu", DeviceOptions{CPUWeightFormat: WeightsQ4_1})
	if err != nil {
		t.Fatal(err)
	}
	m41, err := Load(path, "q41", OnDevice(dev41))
	if err != nil {
		t.Fatal(err)
	}
	if f := m41.dw.Layers[0].Wq.Frozen().Format; f != kern.Q4_1 {
		t.Errorf("q4_1 load: attn_q stored as %s", f)
	}
}

func promptLP(t *testing.T, m *Model, ids []int32) []float32 {
	t.Helper()
	res, err := m.Sample(t.Context(), nil, SampleRequest{Prompt: ids, NumSamples: 1, PromptLogprobs: true,
		Params: SampleParams{MaxTokens: 1, Temperature: 0, TopP: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return res.PromptLogprobs
}

// TestQ4KFromSafetensors: a HuggingFace directory loaded on a CPU in q4_k stores its
// layers in q4_k (the tiny preset's rows are whole super-blocks) but for the v and down
// projections of the layers llama.cpp's Q4_K_M gives more bits, which take q6_k, as does
// its embedding (q8_0 where rows are not whole super-blocks), as a GGUF file's F32
// matrices are (placeMore), and keeps no float32 copy.
func TestQ4KFromSafetensors(t *testing.T) {
	dev, _, err := OpenDevice("cpu", DeviceOptions{CPUWeightFormat: WeightsQ4_K})
	if err != nil {
		t.Fatal(err)
	}
	m := tinyModel(t, OnDevice(dev))
	if m.W != nil {
		t.Error("a float32 copy is kept")
	}
	if f, want := m.dw.Embed.Frozen().Format, q4kMoreFormat(m.Cfg.Hidden); f != want {
		t.Errorf("embedding stored as %s, want %s", f, want)
	}
	mixed := 0
	for i := 0; i < m.Cfg.Layers; i++ {
		for name, fz := range m.LayerMatrices(i) {
			want := kern.Q4_K
			if (name == "v" || name == "down") && q4kMoreBits(i, m.Cfg.Layers) {
				want, mixed = q4kMoreFormat(fz.Cols), mixed+1
			}
			if fz == nil || fz.Format != want {
				t.Errorf("layer %d %s stored as %v, want %s", i, name, fz, want)
			}
		}
	}
	if mixed == 0 {
		t.Error("no layer took Q4_K_M's more bits")
	}
	if lp := promptLP(t, m, []int32{1, 5, 9, 33}); math.IsNaN(float64(lp[3])) {
		t.Errorf("logprobs %v", lp)
	}
}
