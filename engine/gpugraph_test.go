//go:build cuda && linux && (amd64 || arm64)

package engine

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/tuft-go/tuft/engine/cuda"
)

// graphAdapters are n adapters with random A and B (the same for the same seed).
func graphAdapters(c Config, seed uint64, n int) []*LoraWeights[float32] {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]*LoraWeights[float32], n)
	for k := range out {
		lw := zeroLike(c, LoraConfig{Rank: 2 + k, TrainAttn: true, TrainMLP: true, TrainUnembed: k == 0})
		for _, p := range lw.pairs() {
			for i := range p.A {
				p.A[i] = float32(rng.NormFloat64() * 0.2)
			}
			for i := range p.B {
				p.B[i] = float32(rng.NormFloat64() * 0.2)
			}
		}
		lw.Scale = 1
		out[k] = &lw
	}
	return out
}

type statser interface{ Stats() cuda.Stats }

// Decoding with each step replayed as a CUDA graph gives the same tokens and
// log-probabilities, bit for bit, as launching every kernel: batches of 1, 3 and 4
// sequences over three adapters and the base model, sequence 0 switching adapters every
// other step (so two graphs of one batch size alternate), 19 steps each, block tables
// growing past a block (a new shape: tables are padded to a power of two). Positions, KV slots, block tables and token ids change every
// step: a replay that read any of them stale would give other logits.
func TestGPUGraphDecodingEqualsEager(t *testing.T) {
	for _, mode := range gpuModes {
		t.Run(mode.name, func(t *testing.T) {
			c := smallConfig("qwen2", false)
			w := randWeights[float32](c, rand.New(rand.NewPCG(4, 4)), true)
			var models [2]*Model
			var adapters [2][]*LoraWeights[float32]
			for i, graphs := range []bool{false, true} {
				m, err := NewModel("g", c, w, nil, OnDevice(openGPUGraphs(t, mode.fp32, graphs)))
				if err != nil {
					t.Fatal(err)
				}
				models[i], adapters[i] = m, append(graphAdapters(c, 7, 3), nil)
			}
			gs := models[1].dev.(statser)
			steps := 0
			for _, batch := range []int{1, 3, 4} {
				var caches [2][]*KVCache[float32]
				for i, m := range models {
					pool, err := m.NewKVPool(64)
					if err != nil {
						t.Fatal(err)
					}
					defer pool.Close()
					for range batch {
						caches[i] = append(caches[i], pool.NewCache())
					}
				}
				rng := rand.New(rand.NewPCG(uint64(batch), 2))
				last := make([]int32, batch)
				for step := 0; step < 20; step++ {
					var outs [2][]StepOut
					us := make([]float64, batch)
					for s := range us {
						us[s] = rng.Float64()
					}
					for i, m := range models {
						seqs := make([]StepSeq, batch)
						for s := range seqs {
							toks := []int32{last[s]}
							if step == 0 { // the prompt: a prefill, launched eagerly
								toks = []int32{int32(1 + s), 9, int32(20 + s), 5}
							}
							ad := adapters[i][s%4]
							if s == 0 && step%2 == 1 {
								ad = adapters[i][1]
							}
							seqs[s] = StepSeq{Adapter: ad, Cache: caches[i][s], Tokens: toks,
								Draws: []Draw{{Temperature: 0.9, TopP: 1, U: us[s]}}}
						}
						o, err := m.DecodeStep(context.Background(), seqs)
						if err != nil {
							t.Fatal(err)
						}
						outs[i] = o
					}
					for s := range batch {
						e, g := outs[0][s], outs[1][s]
						if e.Tokens[0] != g.Tokens[0] || math.Float32bits(e.Logprobs[0]) != math.Float32bits(g.Logprobs[0]) {
							t.Fatalf("batch %d step %d sequence %d: eager token %d logprob %v, graph token %d logprob %v",
								batch, step, s, e.Tokens[0], e.Logprobs[0], g.Tokens[0], g.Logprobs[0])
						}
						last[s] = g.Tokens[0]
					}
					if step > 0 {
						steps++
					}
				}
			}
			st := gs.Stats()
			t.Logf("graphs: %+v over %d decode steps", st, steps)
			// Per batch size four keys (sequence 0's adapter alternates; the block tables grow
			// from one block to two at position 16, decode step 13), each run eagerly the
			// first time, captured the second; every other decode step is a launch.
			if st.GraphCaptures != 12 || st.GraphLaunches != int64(steps-12) || st.GraphFallbacks != 0 {
				t.Fatalf("graph stats %+v: want 12 captures, %d launches, no fallback", st, steps-12)
			}
		})
	}
}

// emuCounters reads the emulation's counters of host-side calls that queue device work
// (emu.cpp's tuft_emu_counters): kernels, cuBLAS products, memsets, copies, graph
// launches, operations run by graph launches. ok is false off the emulation.
func emuCounters(t *testing.T) (func() [6]uint64, bool) {
	for _, dir := range filepath.SplitList(os.Getenv("TUFT_CUDA_LIB_DIRS")) {
		lib, err := purego.Dlopen(filepath.Join(dir, "libcuda.so.1"), purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			continue
		}
		sym, err := purego.Dlsym(lib, "tuft_emu_counters")
		if err != nil {
			continue
		}
		return func() [6]uint64 {
			var out [6]uint64
			purego.SyscallN(sym, uintptr(unsafe.Pointer(&out[0])))
			return out
		}, true
	}
	return nil, false
}

// Host-side launches per decode token at batch 1 (the emulation counts the calls that
// queue device work): eagerly, every kernel, product, memset and copy of the step; with
// the step replayed as a graph, its input copy, the graph launch, and the sampling
// after it. docs/gpu.md quotes the log.
func TestGPUGraphLaunchesPerToken(t *testing.T) {
	counters, ok := emuCounters(t)
	if !ok {
		t.Skip("not the CPU emulation (no tuft_emu_counters)")
	}
	for _, lora := range []bool{false, true} {
		var per [2][6]float64
		for i, graphs := range []bool{false, true} {
			dev := openGPUGraphs(t, false, graphs)
			m := tinyModel(t, OnDevice(dev))
			var ad *LoraWeights[float32]
			if lora {
				ad = graphAdapters(m.Cfg, 3, 1)[0]
			}
			pool, err := m.NewKVPool(16)
			if err != nil {
				t.Fatal(err)
			}
			cache := pool.NewCache()
			step := func(toks []int32) int32 {
				o, err := m.DecodeStep(context.Background(), []StepSeq{{Adapter: ad, Cache: cache, Tokens: toks, Draws: []Draw{{TopP: 1}}}})
				if err != nil {
					t.Fatal(err)
				}
				return o[0].Tokens[0]
			}
			tok := step([]int32{1, 2, 3})
			tok = step([]int32{tok}) // the shape's first step: eager
			tok = step([]int32{tok}) // the capture
			const n = 8
			before := counters()
			for range n {
				tok = step([]int32{tok})
			}
			after := counters()
			for k := range per[i] {
				per[i][k] = float64(after[k]-before[k]) / n
			}
			pool.Close()
		}
		total := func(c [6]float64) float64 { return c[0] + c[1] + c[2] + c[3] + c[4] }
		t.Logf("tiny preset (%d layers), LoRA %v, per decode token [kernels gemms memsets copies graph-launches graph-ops]: eager %v = %.0f host calls; graphs %v = %.0f host calls",
			tinyModel(t).Cfg.Layers, lora, per[0], total(per[0]), per[1], total(per[1]))
		if per[1][4] != 1 || total(per[1]) > total(per[0])/4 {
			t.Fatalf("graphs: %v host calls per token against %v eagerly", per[1], per[0])
		}
	}
}

// BenchmarkGPUDecodeGraphs times batch-1 decoding with decode steps as CUDA graphs and
// without (scripts/gpu-check.sh's decode-graphs step): a model of the preset
// TUFT_DECODE_BENCH_PRESET (default smollm2-135m-shape, where launches rather than weight
// reads bound a token) written with random weights, an 8-token prompt, then
// TUFT_DECODE_BENCH_TOKENS (default 64) tokens per iteration; tok/s reported (the
// prompt's step included in the time, not in the tokens).
func BenchmarkGPUDecodeGraphs(b *testing.B) {
	name := cmp.Or(os.Getenv("TUFT_DECODE_BENCH_PRESET"), "smollm2-135m-shape")
	tokens, err := strconv.Atoi(cmp.Or(os.Getenv("TUFT_DECODE_BENCH_TOKENS"), "64"))
	if err != nil || tokens < 1 {
		b.Fatalf("TUFT_DECODE_BENCH_TOKENS: %q", os.Getenv("TUFT_DECODE_BENCH_TOKENS"))
	}
	// TUFT_DECODE_BENCH_MODEL: a model directory to decode instead (gpu-check.sh's 7B).
	dir := os.Getenv("TUFT_DECODE_BENCH_MODEL")
	if dir == "" {
		dir = b.TempDir()
		if err := WritePreset(name, dir); err != nil {
			b.Fatal(err)
		}
	} else {
		name = filepath.Base(dir)
	}
	for _, v := range []struct{ graphs, gemv bool }{{false, true}, {true, true}, {true, false}} {
		graphs := v.graphs
		b.Run(fmt.Sprintf("%s/batch1/graphs=%v/gemv=%v", name, graphs, v.gemv), func(b *testing.B) {
			dev, err := cuda.OpenDevice(cuda.Options{LibDirs: filepath.SplitList(os.Getenv("TUFT_CUDA_LIB_DIRS")), Graphs: graphs, GraphLimit: 4,
				NoGEMV: !v.gemv})
			if err != nil {
				b.Skipf("no GPU: %v", err)
			}
			m, err := Load(dir, "bench", OnDevice(dev))
			if err != nil {
				b.Fatal(err)
			}
			pool, err := m.NewKVPool(2 + (tokens+9)/16)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			gen := func() {
				cache := pool.NewCache()
				defer cache.Release()
				toks := []int32{1, 2, 3, 4, 5, 6, 7, 8} // the prompt's step, then one step per token
				for range tokens + 1 {
					o, err := m.DecodeStep(context.Background(), []StepSeq{{Cache: cache, Tokens: toks, Draws: []Draw{{TopP: 1}}}})
					if err != nil {
						b.Fatal(err)
					}
					toks = o[0].Tokens
				}
			}
			gen() // warm-up: RoPE tables, cuBLAS, the graph's capture (the second decode step)
			b.ResetTimer()
			for range b.N {
				gen()
			}
			b.ReportMetric(float64(b.N*tokens)/b.Elapsed().Seconds(), "tok/s")
			if st, ok := dev.(statser); ok {
				s := st.Stats()
				b.ReportMetric(float64(s.GraphLaunches), "graph-launches")
			}
		})
	}
}
