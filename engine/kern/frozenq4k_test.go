package kern

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

// TestKQuantsAreGGMLs: the Q4_K, Q5_0 and Q6_K quantisers store the bytes ggml's reference
// quantisers store for the same float32 rows (testdata/ggml_kquants.bin, written by
// tools/llamacppref/kquant_golden.py through llama.cpp 0.3.36's libggml-base), and the
// portable dequantisers give back what those blocks encode.
func TestKQuantsAreGGMLs(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/ggml_kquants.bin")
	if err != nil {
		t.Fatal(err)
	}
	rows, cols := int(binary.LittleEndian.Uint32(raw)), int(binary.LittleEndian.Uint32(raw[4:]))
	raw = raw[8:]
	src := make([]float32, rows*cols)
	for i := range src {
		src[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	raw = raw[4*len(src):]
	nK, n5, n6 := rows*cols/QKBlock*Q4_K.blockBytes(), rows*cols/QBlock*Q5_0.blockBytes(), rows*cols/QKBlock*Q6_K.blockBytes()
	if len(raw) != nK+n5+n6 {
		t.Fatalf("golden file: %d bytes of blocks, want %d", len(raw), nK+n5+n6)
	}
	for _, c := range []struct {
		f    WeightFormat
		want []byte
	}{{Q4_K, raw[:nK]}, {Q5_0, raw[nK : nK+n5]}, {Q6_K, raw[nK+n5:]}} {
		w := NewFrozen(src, rows, cols, c.f)
		if w.Format != c.f {
			t.Fatalf("%s stored as %s", c.f, w.Format)
		}
		bb := c.f.blockBytes()
		for b := 0; b < len(c.want)/bb; b++ {
			if got := w.blk[b*bb : (b+1)*bb]; !bytes.Equal(got, c.want[b*bb:(b+1)*bb]) {
				t.Errorf("%s block %d differs from ggml's:\n got  %x\n want %x", c.f, b, got, c.want[b*bb:(b+1)*bb])
			}
		}
		// What the blocks encode is near the source (the format's storage error).
		deq := widened(w)
		var worst float64
		for i := range src {
			worst = max(worst, math.Abs(float64(deq[i]-src[i])))
		}
		if worst > 0.15 {
			t.Errorf("%s: worst storage error %g", c.f, worst)
		}
	}
}

// TestKQuantProducts checks both products with q4_k, q6_k and q5_0 weights, at every
// kernel level, against float64 products with the widened matrix (as
// TestFrozenProducts does for the other formats, with the activations as the product
// quantises them), over shapes with whole super-blocks.
// Not parallel: atLevel sets the package's kernel switches, which the parallel tests read.
func TestKQuantProducts(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 2))
	shapes := [][3]int{{1, 9, 256}, {1, 33, 1536}, {2, 17, 512}, {3, 13, 256}, {5, 16, 768}, {17, 21, 512}, {40, 7, 256}, {1, 5, 96}, {6, 11, 576}}
	for _, f := range []WeightFormat{Q4_K, Q6_K, Q5_0} {
		for _, s := range shapes {
			m, rows, cols := s[0], s[1], s[2]
			w := kquantMatrix(t, rng, f, rows, cols)
			if w == nil {
				continue
			}
			wf := widened(w)
			a, g := randSlice(rng, m*cols), randSlice(rng, m*rows)
			for _, acc := range []bool{false, true} {
				for _, level := range kernelLevels {
					name := fmt.Sprintf("%s %dx%dx%d acc=%v %s", f, m, rows, cols, acc, level)
					initNT, initNN := randSlice(rng, m*rows), randSlice(rng, m*cols)
					nt, nn := append([]float32(nil), initNT...), append([]float32(nil), initNN...)
					var fa []float32
					atLevel(level, func() {
						FrozenMatMulNT(nt, a, w, m, acc)
						FrozenMatMulNN(nn, g, w, m, acc)
						fa = forwardActs(w, a, m)
					})
					wantNT, wantNN := ref64NT(fa, wf, m, rows, cols), ref64NN(g, wf, m, rows, cols)
					if acc {
						addTo(wantNT, initNT)
						addTo(wantNN, initNN)
					}
					close32(t, "NT "+name, nt, wantNT, cols)
					close32(t, "NN "+name, nn, wantNN, rows)
				}
			}
		}
	}
}

// kquantMatrix is a random [rows×cols] matrix in f: quantised for q4_k and q5_0, random
// blocks with a sane scale for q6_k (which the engine only loads). nil when f cannot
// hold rows of cols.
func kquantMatrix(t *testing.T, rng *rand.Rand, f WeightFormat, rows, cols int) *Frozen {
	t.Helper()
	if f != Q6_K {
		w := NewFrozen(randSlice(rng, rows*cols), rows, cols, f)
		if f == Q4_K && cols%QKBlock != 0 && w.Format != Q5_0 {
			t.Fatalf("q4_k over rows of %d stored as %s, want q5_0", cols, w.Format)
		}
		return w
	}
	if cols%QKBlock != 0 {
		return nil
	}
	bb := Q6_K.blockBytes()
	data := make([]byte, rows*cols/QKBlock*bb)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for b := 0; b < len(data)/bb; b++ {
		binary.LittleEndian.PutUint16(data[b*bb+208:], ToF16(0.001+0.01*rng.Float32()))
	}
	w, err := FrozenBlocks(Q6_K, data, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestKQuantFormats pins the bytes a weight takes, the fallbacks, and the names
// configuration may choose.
func TestKQuantFormats(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(26, 3))
	for _, c := range []struct {
		f          WeightFormat
		cols       int
		stored     WeightFormat
		bytesPerWt float64
	}{{Q4_K, 512, Q4_K, 144.0 / 256}, {Q4_K, 576, Q5_0, 22.0 / 32}, {Q4_K, 40, BF16, 2}, {Q5_0, 64, Q5_0, 22.0 / 32},
		{Q6_K, 512, Q6_K, 210.0 / 256}, {Q6_K, 576, Q8_0, 34.0 / 32}, {Q6_K, 40, BF16, 2}} {
		w := NewFrozen(randSlice(rng, 3*c.cols), 3, c.cols, c.f)
		if w.Format != c.stored || float64(w.Bytes())/float64(3*c.cols) != c.bytesPerWt {
			t.Errorf("%s over %d: stored %s at %v bytes a weight, want %s at %v", c.f, c.cols, w.Format,
				float64(w.Bytes())/float64(3*c.cols), c.stored, c.bytesPerWt)
		}
	}
	if f, err := ParseWeightFormat("q4_k"); err != nil || f != Q4_K {
		t.Errorf("q4_k: %v, %v", f, err)
	}
	for _, s := range []string{"q6_k", "q5_0", "q4_K"} {
		if _, err := ParseWeightFormat(s); err == nil {
			t.Errorf("%s accepted as a chosen format", s)
		}
	}
	if _, err := FrozenBlocks(Q4_K, make([]byte, 144), 1, 288); err == nil {
		t.Error("q4_k rows of 288 accepted")
	}
	if _, err := FrozenBlocks(Q6_K, make([]byte, 209), 1, 256); err == nil {
		t.Error("short q6_k data accepted")
	}
	// A partial segment of a super-block widens to the same values as the whole row
	// (Q4_K and Q6_K dequantise only the sub-blocks or groups it touches).
	for _, f := range []WeightFormat{Q4_K, Q6_K} {
		w := NewFrozen(randSlice(rng, 2*512), 2, 512, f)
		full := make([]float32, 512)
		w.Row(full, 1)
		for _, sg := range [][2]int{{100, 300}, {0, 16}, {17, 5}, {250, 262}, {496, 16}} {
			seg := make([]float32, sg[1])
			w.rowSeg(seg, 1, sg[0])
			for i, v := range seg {
				if math.Float32bits(v) != math.Float32bits(full[sg[0]+i]) {
					t.Fatalf("%s segment %v element %d = %v, row %v", f, sg, i, v, full[sg[0]+i])
				}
			}
		}
	}
}

// BenchmarkKQuantDot is the decode dot of each format per CPU second over SmolLM2's
// ffn_down shape (576 rows of 1536), W in L2: compare with BenchmarkFrozenDotCompute.
func BenchmarkKQuantDot(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, r := range []struct {
		f     WeightFormat
		float bool // the float dots the integer ones replaced (frozenq8dot.go)
	}{{Q4_1, false}, {Q4_K, false}, {Q6_K, false}, {Q5_0, false}, {Q8_0, false}, {Q4_1, true}, {Q4_K, true}, {Q6_K, true}, {Q5_0, true}, {Q8_0, true}} {
		f, name := r.f, r.f.String()
		if r.float {
			name += "-float"
		}
		b.Run(name, func(b *testing.B) {
			if r.float {
				if !useVNNI {
					b.Skip("no integer dots here")
				}
				defer func(v bool) { useVNNI = v }(useVNNI)
				useVNNI = false
			}
			w := NewFrozen(randSlice(rng, 576*1536), 576, 1536, f)
			x, c := randSlice(rng, 1536), make([]float32, 576)
			b.ResetTimer()
			c0 := cpuTime()
			for i := 0; i < b.N; i++ {
				FrozenMatMulNT(c, x, w, 1, false)
			}
			b.ReportMetric(float64(576*1536)*float64(b.N)/float64((cpuTime()-c0).Nanoseconds()), "weights/ns-cpu")
		})
	}
}

// TestKQuantWiden: the assembly's widening of q4_k, q6_k and q5_0 (the 16-wide
// tiles' and the packed GEMM's source) equals the portable dequantisers bit for bit, over
// whole rows, whole-block segments and partial ones, at every kernel level (not
// parallel: atLevel).
func TestKQuantWiden(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 5))
	for _, f := range []WeightFormat{Q4_K, Q6_K, Q5_0} {
		w := NewFrozen(randSlice(rng, 3*768), 3, 768, f)
		for _, seg := range [][2]int{{0, 768}, {256, 512}, {32, 64}, {100, 300}, {5, 3}} {
			got, want := make([]float32, seg[1]), make([]float32, seg[1])
			for _, level := range kernelLevels {
				for r := 0; r < w.Rows; r++ {
					atLevel(level, func() { w.widen(got, r, seg[0]) })
					w.rowSeg(want, r, seg[0])
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s %s row %d seg %v: element %d = %v, want %v", f, level, r, seg, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}
