package kern

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time this process has used (user and system, every thread): on a
// shared machine, rates per CPU second vary less than rates per wall second.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var allFormats = []WeightFormat{F32, BF16, Q8_0, Q4_1, Q4_K}

// widened is W as the kernels see it: every row widened to float32 by the portable code.
func widened(w *Frozen) []float32 {
	out := make([]float32, w.Rows*w.Cols)
	for r := 0; r < w.Rows; r++ {
		w.rowSeg(out[r*w.Cols:(r+1)*w.Cols], r, 0)
	}
	return out
}

// kernelLevels are the instruction sets a test runs the kernels at: what the machine
// has, AVX2 without AVX-512, and the portable Go.
var kernelLevels = []string{"native", "avx2", "portable"}

// atLevel runs f with the kernels limited to level (a no-op where the machine has less).
func atLevel(level string, f func()) {
	old2, old512, oldDP, oldVNNI, oldT, oldSD := useAVX2, useAVX512, useDPBF16, useVNNI, useTileF32, useSDOT
	defer func() {
		useAVX2, useAVX512, useDPBF16, useVNNI, useTileF32, useSDOT = old2, old512, oldDP, oldVNNI, oldT, oldSD
	}()
	switch level {
	case "avx2":
		useAVX512, useDPBF16, useVNNI = false, false, false
	case "portable":
		useAVX2, useAVX512, useDPBF16, useVNNI, useTileF32, useSDOT = false, false, false, false, false, false
	}
	f()
}

// TestFrozenProducts checks both products of every format, assembly and portable,
// against float64 products with the widened matrix: the kernels' only error is float32
// rounding (tolerance 1e-5·√k relative, as the float32 kernels' test), whatever the
// storage error of the format.
func TestFrozenProducts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	// {m, rows, cols}: decode (m = 1: fused dots), 3×4 tiles (2 ≤ m < 16 or 32, m not a
	// multiple of 3) and the packed GEMM (m ≥ 16 or 32) rows; rows not a multiple of the 4-row
	// tile or the 16-column panel; cols of 1, 2 and 18 blocks, and 40 (not whole blocks:
	// stored as bf16) and 17 (below one bf16 vector); 256 and 512, whole super-blocks (q4_k
	// stores other widths as q5_0), for prompts and (m ≤ 3) decode steps.
	shapes := [][3]int{{1, 5, 32}, {1, 33, 64}, {2, 17, 576}, {3, 70, 96}, {5, 16, 32}, {6, 21, 64}, {7, 300, 576}, {16, 47, 96},
		{1, 9, 40}, {9, 11, 40}, {2, 3, 17}, {64, 37, 96}, {70, 20, 64}, {66, 5, 40}, {20, 19, 512}, {8, 3, 256},
		{1, 7, 512}, {2, 5, 256}, {3, 9, 768}}
	for _, f := range allFormats {
		for _, s := range shapes {
			m, rows, cols := s[0], s[1], s[2]
			src := randSlice(rng, rows*cols)
			w := NewFrozen(src, rows, cols, f)
			wf := widened(w)
			a, g := randSlice(rng, m*cols), randSlice(rng, m*rows)
			for _, acc := range []bool{false, true} {
				for _, level := range kernelLevels {
					name := fmt.Sprintf("%s(%s) %dx%dx%d acc=%v %s", f, w.Format, m, rows, cols, acc, level)
					initNT, initNN := randSlice(rng, m*rows), randSlice(rng, m*cols)
					nt, nn := append([]float32(nil), initNT...), append([]float32(nil), initNN...)
					var fa []float32
					run := func() {
						FrozenMatMulNT(nt, a, w, m, acc)
						FrozenMatMulNN(nn, g, w, m, acc)
						fa = forwardActs(w, a, m)
					}
					atLevel(level, run)
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

// forwardActs is A [m×Cols] as a forward product with W multiplies it: rounded to
// bfloat16 when W is bfloat16 (frozenbf16.go), quantised to 8-bit blocks when the
// product takes the q8_0 integer tiles (frozenq8.go) or dots (frozenq8dot.go), else as
// given.
func forwardActs(w *Frozen, a []float32, m int) []float32 {
	if w.intTiles(m) || w.intDottable(m, true) {
		out := make([]float32, len(a))
		for p := 0; p < len(a); p += QBlock {
			var qs [QBlock]byte
			d := quantActBlock(&qs, a[p:p+QBlock])
			for j, q := range qs {
				out[p+j] = d * float32(int8(q^0x80))
			}
		}
		return out
	}
	if w.Format != BF16 {
		return a
	}
	out := make([]float32, len(a))
	for i, v := range a {
		out[i] = FromBF16(ToBF16(v))
	}
	return out
}

func ref64NT(a, w []float32, m, rows, cols int) []float32 {
	out := make([]float32, m*rows)
	for i := 0; i < m; i++ {
		for j := 0; j < rows; j++ {
			var s float64
			for p := 0; p < cols; p++ {
				s += float64(a[i*cols+p]) * float64(w[j*cols+p])
			}
			out[i*rows+j] = float32(s)
		}
	}
	return out
}

func ref64NN(g, w []float32, m, rows, cols int) []float32 {
	out := make([]float32, m*cols)
	for i := 0; i < m; i++ {
		for j := 0; j < cols; j++ {
			var s float64
			for p := 0; p < rows; p++ {
				s += float64(g[i*rows+p]) * float64(w[p*cols+j])
			}
			out[i*cols+j] = float32(s)
		}
	}
	return out
}

func addTo(dst, src []float32) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// TestFrozenWiden checks the assembly's widening (used to pack GEMM panels and by the
// 16-wide tiles), AVX-512 and AVX2, against the portable code, bit for bit, over whole
// and partial rows.
func TestFrozenWiden(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, f := range allFormats {
		w := NewFrozen(randSlice(rng, 7*96), 7, 96, f)
		for _, seg := range [][2]int{{0, 96}, {32, 64}, {16, 48}, {0, 17}, {5, 3}} {
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

// TestFrozenStorageError bounds what each format changes in a weight: bf16 half an ulp
// of its 8-bit mantissa, q8_0 half a step d = max|w|/127 of the block, q4_1 half a step
// d = (max−min)/15 (plus the half-precision rounding of d and m). It also pins the
// bytes a weight takes.
func TestFrozenStorageError(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	rows, cols := 64, 256
	src := randSlice(rng, rows*cols)
	for i := range src {
		src[i] *= 0.05 // the scale of real weights
	}
	bytes := map[WeightFormat]float64{F32: 4, BF16: 2, Q8_0: 34.0 / 32, Q4_1: 20.0 / 32}
	for _, f := range allFormats {
		if f == Q4_K {
			continue // its blocks are ggml's byte for byte: TestKQuantsAreGGMLs
		}
		w := NewFrozen(src, rows, cols, f)
		if got := float64(w.Bytes()) / float64(rows*cols); got != bytes[f] {
			t.Errorf("%s: %v bytes a weight, want %v", f, got, bytes[f])
		}
		deq := widened(w)
		for b := 0; b < rows*cols/QBlock; b++ {
			x := src[b*QBlock : (b+1)*QBlock]
			lo, hi, amax := x[0], x[0], float32(0)
			for _, v := range x {
				lo, hi, amax = min(lo, v), max(hi, v), max(amax, float32(math.Abs(float64(v))))
			}
			for j, v := range x {
				e := math.Abs(float64(deq[b*QBlock+j] - v))
				var bound float64
				switch f {
				case F32:
					bound = 0
				case BF16:
					bound = math.Abs(float64(v)) * (1.0 / 256)
				case Q8_0:
					bound = float64(amax)/127*0.5*1.001 + float64(amax)*1e-3
				case Q4_1:
					bound = float64(hi-lo)/15*0.5*1.001 + float64(hi-lo)*2e-3 + math.Abs(float64(lo))*1e-3
				}
				if e > bound {
					t.Fatalf("%s: weight %d = %v stored as %v (error %g > %g)", f, b*QBlock+j, v, deq[b*QBlock+j], e, bound)
				}
			}
		}
	}
}

// TestQuantIdempotent: quantising what a format stores gives the same bytes back, so a
// GGUF BF16, Q8_0 or Q4_1 file widened to float32 at load and stored again in its own
// format holds llama.cpp's blocks exactly.
func TestQuantIdempotent(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	src := randSlice(rng, 8*128)
	for _, f := range []WeightFormat{BF16, Q8_0, Q4_1} {
		w := NewFrozen(src, 8, 128, f)
		again := NewFrozen(widened(w), 8, 128, f)
		if fmt.Sprint(w.bf, w.blk) != fmt.Sprint(again.bf, again.blk) {
			t.Errorf("%s: requantising changed the stored weights", f)
		}
	}
}

func TestHalfConversions(t *testing.T) {
	for _, c := range []struct {
		f float32
		h uint16
	}{{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {1e6, 0x7c00}, {6.103515625e-05, 0x0400}, {5.960464477539063e-08, 0x0001}, {1.0009765625, 0x3c01}, {1.00048828125, 0x3c00}, {1.00146484375, 0x3c02}} {
		if got := ToF16(c.f); got != c.h {
			t.Errorf("ToF16(%v) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
	for h := 0; h < 0x10000; h++ {
		if h&0x7c00 == 0x7c00 {
			continue // Inf, NaN
		}
		v := FromF16(uint16(h))
		if back := ToF16(v); back != uint16(h) && !(v == 0 && h == 0x8000) {
			t.Fatalf("half %#04x → %v → %#04x", h, v, back)
		}
	}
	if got := FromF16(0x8001); got != -5.960464477539063e-08 {
		t.Errorf("FromF16(0x8001) = %v", got)
	}
	for _, c := range []struct {
		f float32
		h uint16
	}{{1, 0x3f80}, {-1, 0xbf80}, {1.00390625, 0x3f80}, {1.01171875, 0x3f82}, {3.1415927, 0x4049}} {
		if got := ToBF16(c.f); got != c.h {
			t.Errorf("ToBF16(%v) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
}

func TestFrozenBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	w := NewFrozen(randSlice(rng, 4*64), 4, 64, Q8_0)
	v, err := FrozenBlocks(Q8_0, w.blk, 4, 64)
	if err != nil || fmt.Sprint(widened(v)) != fmt.Sprint(widened(w)) {
		t.Fatalf("FrozenBlocks: %v", err)
	}
	if _, err := FrozenBlocks(Q8_0, w.blk[:10], 4, 64); err == nil {
		t.Error("short data accepted")
	}
	if _, err := FrozenBlocks(BF16, w.blk, 4, 64); err == nil {
		t.Error("bf16 accepted as a block format")
	}
	if d := FromF16(binary.LittleEndian.Uint16(w.blk)); d <= 0 {
		t.Errorf("scale %v", d)
	}
	if _, err := ParseWeightFormat("q3_k"); err == nil {
		t.Error("q3_k accepted")
	}
	for _, f := range allFormats {
		if g, err := ParseWeightFormat(f.String()); err != nil || g != f {
			t.Errorf("ParseWeightFormat(%s) = %v, %v", f, g, err)
		}
	}
}

func benchFrozen(b *testing.B, f WeightFormat, m, n, k int) {
	rng := rand.New(rand.NewPCG(1, 2))
	w := NewFrozen(randSlice(rng, n*k), n, k, f)
	a, c := randSlice(rng, m*k), make([]float32, m*n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		FrozenMatMulNT(c, a, w, m, false)
	}
	b.ReportMetric(float64(w.Bytes())*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// The MLP's up projection of SmolLM2-135M (1536×576), stacked until W is at least
// 128 MB so that it comes from memory, as in a decode step (q4_k's rows of 576 are
// q5_0); "read" is a read-only pass over as many bytes on every core (kern.Dot of a
// buffer with itself, one stream a core), the rate the products are bounded by.
func BenchmarkFrozenGEMV(b *testing.B) {
	rows := func(f WeightFormat) int {
		return max(32, (128<<20)/(1536*NewFrozen(make([]float32, 576), 1, 576, f).Bytes())) * 1536
	}
	for _, f := range allFormats {
		b.Run(f.String(), func(b *testing.B) { benchFrozen(b, f, 1, rows(f), 576) })
	}
	// Rows of whole super-blocks: Q4_K itself (the bulk of a 7B model's Q4_K_M file).
	b.Run("q4_k-k1536", func(b *testing.B) { benchFrozen(b, Q4_K, 1, 128<<20/(1536/256*144), 1536) })
	b.Run("read", func(b *testing.B) {
		x := make([]float32, 32<<20)
		for i := range x {
			x[i] = 1
		}
		var mu sync.Mutex
		var sink float32
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			split(len(x), len(x), 4096, func(lo, hi int) {
				s := Dot(x[lo:hi], x[lo:hi])
				mu.Lock()
				sink += s
				mu.Unlock()
			})
		}
		b.ReportMetric(4*float64(len(x))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		_ = sink
	})
	if !useVNNI {
		return
	}
	for _, f := range []WeightFormat{Q8_0, Q4_K} { // as before the integer dots (frozenq8dot.go)
		b.Run(f.String()+"-float", func(b *testing.B) {
			defer func(v bool) { useVNNI = v }(useVNNI)
			useVNNI = false
			benchFrozen(b, f, 1, rows(f), 576)
		})
	}
}

func BenchmarkFrozenBatch16(b *testing.B) {
	for _, f := range allFormats {
		b.Run(f.String(), func(b *testing.B) { benchFrozen(b, f, 16, 32*1536, 576) })
	}
}

// BenchmarkFrozenTileVsPacked times both paths for rows of A around tileMaxRows (one
// goroutine, W in L2: the compute, not the memory).
func BenchmarkFrozenTileVsPacked(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	n, k := 256, 576
	src := randSlice(rng, n*k)
	for _, f := range []WeightFormat{F32, BF16, Q8_0, Q4_1} {
		w := NewFrozen(src, n, k, f)
		for _, m := range []int{1, 4, 16, 32, 48, 64, 128, 255} {
			a, c := randSlice(rng, m*k), make([]float32, m*n)
			b.Run(fmt.Sprintf("%s/m%d/tiles", f, m), func(b *testing.B) {
				t0 := cpuTime()
				for i := 0; i < b.N; i++ {
					if f == F32 {
						w.f32Tiles(c, a, m, 0, n, false)
					} else {
						w.tiles(c, a, m, 0, n, false)
					}
				}
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/(cpuTime()-t0).Seconds()/1e9, "GFLOP/cpu-s")
			})
			b.Run(fmt.Sprintf("%s/m%d/packed", f, m), func(b *testing.B) {
				t0 := cpuTime()
				for i := 0; i < b.N; i++ {
					if f == F32 { // the general GEMM's own packing, as matMulNT32
						gemmStrided(c, a, w.f32, m, n, k, n, k, k, false, true, false, false)
					} else {
						gemmPacked(c, a, w.packNT, nil, m, n, k, false, false)
					}
				}
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/(cpuTime()-t0).Seconds()/1e9, "GFLOP/cpu-s")
			})
		}
	}
}

// BenchmarkFrozenDotCompute times the decode kernels with W in L2 (256×576, one
// goroutine): weights per CPU nanosecond, the compute bound of a memory-bound product.
func BenchmarkFrozenDotCompute(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	n, k := 256, 576
	src := randSlice(rng, n*k)
	x := randSlice(rng, k)
	for _, f := range allFormats {
		w := NewFrozen(src, n, k, f)
		b.Run(f.String(), func(b *testing.B) {
			t0 := cpuTime()
			var s float32
			for i := 0; i < b.N; i++ {
				for j := 0; j < n; j++ {
					s += w.dotRow(x, j)
				}
			}
			b.ReportMetric(float64(n*k)*float64(b.N)/float64((cpuTime()-t0).Nanoseconds()), "weights/cpu-ns")
			_ = s
		})
	}
	if !useVNNI {
		return
	}
	// q8_0 on the one-row integer dots (frozenq8dot.go), the row quantised once.
	w := NewFrozen(src, n, k, Q8_0)
	row, out := make([]float32, q8RowLen(k)), make([]float32, n)
	quantRow(row, x)
	b.Run("q8_0-int", func(b *testing.B) {
		t0 := cpuTime()
		for i := 0; i < b.N; i++ {
			w.intDots(out, row, 0, n, false)
		}
		b.ReportMetric(float64(n*k)*float64(b.N)/float64((cpuTime()-t0).Nanoseconds()), "weights/cpu-ns")
	})
}

// BenchmarkFrozenPrompt is a 128-row product (prompt processing) with the MLP's up
// projection, on each path the machine has: GFLOP per wall second and per CPU second
// (the steadier figure on a shared machine; run with -cpu 1 for the per-core rate).
func BenchmarkFrozenPrompt(b *testing.B) {
	for _, f := range allFormats {
		for _, level := range []string{"native", "avx2"} {
			for _, m := range []int{16, 32, 64, 128, 512} {
				b.Run(fmt.Sprintf("%s/%s/m%d", f, level, m), func(b *testing.B) {
					rng := rand.New(rand.NewPCG(1, 2))
					n, k := 1536, 576
					w := NewFrozen(randSlice(rng, n*k), n, k, f)
					a, c := randSlice(rng, m*k), make([]float32, m*n)
					var cpu time.Duration
					atLevel(level, func() {
						b.ResetTimer()
						c0 := cpuTime()
						for i := 0; i < b.N; i++ {
							FrozenMatMulNT(c, a, w, m, false)
						}
						cpu = cpuTime() - c0
					})
					flop := 2 * float64(m*n*k) * float64(b.N)
					b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					b.ReportMetric(flop/cpu.Seconds()/1e9, "GFLOP/cpu-s")
				})
			}
		}
	}
}

// TestRoundBF16 checks the activation rounding of bf16 products, assembly and portable,
// bit for bit against ToBF16: ties both ways, carries into the exponent, the largest
// floats (rounding to infinity), subnormals, zeros of both signs, infinities and NaNs
// with payloads in either half; lengths that leave a scalar tail.
func TestRoundBF16(t *testing.T) {
	special := []uint32{0, 0x80000000, 0x3f808000, 0x3f818000, 0x3f80ffff, 0x3fffffff, 0x7f7fffff, 0xff7fffff,
		0x00000001, 0x807fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xff810000, 0x7fffffff, 0x7f80ffff}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 7, 8, 17, 300, 1031} {
		src := make([]float32, n)
		for i := range src {
			if i < len(special) && n > 8 {
				src[i] = math.Float32frombits(special[i])
			} else {
				src[i] = math.Float32frombits(rng.Uint32())
			}
		}
		for _, level := range kernelLevels {
			bits, wide := make([]uint16, n), make([]float32, n)
			atLevel(level, func() { roundBF16(bits, wide, src) })
			for i, v := range src {
				want := ToBF16(v)
				if bits[i] != want || math.Float32bits(wide[i]) != uint32(want)<<16 {
					t.Fatalf("%s n=%d: %#08x rounds to %#04x (wide %#08x), want %#04x", level, n, math.Float32bits(v), bits[i],
						math.Float32bits(wide[i]), want)
				}
			}
		}
	}
}

// TestFrozenWideKeepsActivations checks that training's forward product never rounds the
// activations, on every path (fused dots, 3×4 and AVX-512 BF16 tiles, the packed GEMM) at
// every kernel level: W is the identity (exact in float32 and bfloat16; the block formats
// store 1 as a scaled integer, and never round A) and A has 20 significant
// bits, so C must equal A bit for bit, where a bfloat16 rounding of A would keep 8 bits.
// The sampling product (FrozenMatMulNT) with bfloat16 weights must round (the contrast
// shows the test can tell).
func TestFrozenWideKeepsActivations(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, f := range []WeightFormat{F32, BF16} {
		for _, s := range [][2]int{{1, 64}, {2, 64}, {5, 64}, {16, 96}, {31, 64}, {40, 64}, {97, 128}} {
			m, k := s[0], s[1]
			eye := make([]float32, k*k)
			for i := 0; i < k; i++ {
				eye[i*k+i] = 1
			}
			w := NewFrozen(eye, k, k, f)
			a := make([]float32, m*k)
			for i := range a {
				a[i] = float32(1+rng.IntN(1<<20)) / (1 << 20) // 20 bits: no bfloat16 holds it
			}
			for _, level := range kernelLevels {
				var wide, round []float32
				atLevel(level, func() {
					wide, round = make([]float32, m*k), make([]float32, m*k)
					FrozenMatMulNTWide(wide, a, w, m, false)
					FrozenMatMulNT(round, a, w, m, false)
				})
				name := fmt.Sprintf("%s %dx%d %s", f, m, k, level)
				for i := range a {
					if wide[i] != a[i] {
						t.Fatalf("%s: wide product element %d = %v, want the activation %v unrounded", name, i, wide[i], a[i])
					}
				}
				if f == BF16 {
					rounded := 0
					for i := range a {
						if round[i] != a[i] {
							rounded++
						}
					}
					if rounded == 0 {
						t.Fatalf("%s: the sampling product kept every activation: the test cannot tell rounding", name)
					}
				}
			}
		}
	}
}

// BenchmarkFrozenWide compares a training-size forward product with bf16 weights
// (512×1536×576, SmolLM2's up projection over a 512-token datum) multiplied as sampling
// does (activations rounded, AVX-512 BF16 tiles where the CPU has them) and as training
// does (float32 activations, W widened into the packed GEMM's panels).
func BenchmarkFrozenWide(b *testing.B) {
	for _, wide := range []bool{false, true} {
		b.Run(fmt.Sprintf("wide=%v", wide), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			m, n, k := 512, 1536, 576
			w := NewFrozen(randSlice(rng, n*k), n, k, BF16)
			a, c := randSlice(rng, m*k), make([]float32, m*n)
			b.ResetTimer()
			c0 := cpuTime()
			for i := 0; i < b.N; i++ {
				if wide {
					FrozenMatMulNTWide(c, a, w, m, false)
				} else {
					FrozenMatMulNT(c, a, w, m, false)
				}
			}
			flop := 2 * float64(m*n*k) * float64(b.N)
			b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			b.ReportMetric(flop/(cpuTime()-c0).Seconds()/1e9, "GFLOP/cpu-s")
		})
	}
}
