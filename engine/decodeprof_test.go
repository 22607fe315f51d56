package engine

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tuft-go/tuft/engine/device"
)

// timedDevice is a Device that adds up the wall time of each operation a decode step
// calls (products keyed by their shape), for the per-operation breakdown of
// TestDecodeProfile. It forwards everything else to the device it wraps.
type timedDevice struct {
	Device
	t  map[string]time.Duration
	n  map[string]int
	on bool // counting: the decode steps, not the prompt's
}

func (d *timedDevice) add(name string, t0 time.Time) {
	if !d.on {
		return
	}
	d.t[name] += time.Since(t0)
	d.n[name]++
}

func (d *timedDevice) KeepsAttnStats() bool { return device.KeepsStats(d.Device) }

func (d *timedDevice) MatMulNT(c, a, b device.Tensor[float32], m, n, k int, acc bool) {
	defer d.add(fmt.Sprintf("MatMulNT %d×%d", n, k), time.Now())
	d.Device.MatMulNT(c, a, b, m, n, k, acc)
}

func (d *timedDevice) RMSNorm(y, rstd, x, w device.Tensor[float32], rows, dim int, eps float64) {
	defer d.add("RMSNorm", time.Now())
	d.Device.RMSNorm(y, rstd, x, w, rows, dim, eps)
}

func (d *timedDevice) AddRMSNorm(sum, y, rstd, a, b, w device.Tensor[float32], rows, dim int, eps float64) {
	defer d.add("AddRMSNorm", time.Now())
	d.Device.AddRMSNorm(sum, y, rstd, a, b, w, rows, dim, eps)
}

func (d *timedDevice) RopeQKV(q, k, v, kc, vc device.Tensor[float32], pos, slots device.Tensor[int32], qHeads, kHeads int, r *device.Rope) {
	defer d.add("RopeQKV", time.Now())
	d.Device.RopeQKV(q, k, v, kc, vc, pos, slots, qHeads, kHeads, r)
}

func (d *timedDevice) Rope(x device.Tensor[float32], pos device.Tensor[int32], heads int, r *device.Rope, inverse bool) {
	defer d.add("Rope", time.Now())
	d.Device.Rope(x, pos, heads, r, inverse)
}

func (d *timedDevice) SwiGLU(a, g, u device.Tensor[float32]) {
	defer d.add("SwiGLU", time.Now())
	d.Device.SwiGLU(a, g, u)
}

func (d *timedDevice) Attention(a *device.Attn[float32]) {
	defer d.add("Attention", time.Now())
	d.Device.Attention(a)
}

func (d *timedDevice) KVWrite(cache, rows device.Tensor[float32], slots device.Tensor[int32], width int) {
	defer d.add("KVWrite", time.Now())
	d.Device.KVWrite(cache, rows, slots, width)
}

func (d *timedDevice) Add(out, a, b device.Tensor[float32]) {
	defer d.add("Add", time.Now())
	d.Device.Add(out, a, b)
}

func (d *timedDevice) Embed(x, table device.Tensor[float32], idx device.Tensor[int32], dim int) {
	defer d.add("Embed", time.Now())
	d.Device.Embed(x, table, idx, dim)
}

func (d *timedDevice) Sample(logits device.Tensor[float32], cols int, draws []device.Draw) ([]int32, []float32) {
	defer d.add("Sample", time.Now())
	return d.Device.Sample(logits, cols, draws)
}

// processCPU is the CPU time this process has used, every thread.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestDecodeProfile times batch-1 decode steps of the real model (TUFT_SMOLLM2_GGUF) in
// each format of TUFT_DECODE_PROFILE (comma-separated, e.g. "bf16,q4_1"): tokens/s, the
// wall time of each device operation per token, and, with TUFT_DECODE_PPROF=dir, a CPU
// profile per format; TUFT_DECODE_PROMPT sets the prompt's length (default 128). It
// reports; it fails only on errors.
func TestDecodeProfile(t *testing.T) {
	formats, path := os.Getenv("TUFT_DECODE_PROFILE"), os.Getenv("TUFT_SMOLLM2_GGUF")
	if formats == "" || path == "" {
		t.Skip("TUFT_DECODE_PROFILE and TUFT_SMOLLM2_GGUF are not both set")
	}
	const steps, reps = 128, 3
	promptLen := 128 // TUFT_DECODE_PROMPT: a longer context weighs attention more
	if v := os.Getenv("TUFT_DECODE_PROMPT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TUFT_DECODE_PROMPT=%q: want a positive number of tokens", v)
		}
		promptLen = n
	}
	ctx := context.Background()
	for _, name := range strings.Split(formats, ",") {
		f, err := ParseWeightFormat(name)
		if err != nil {
			t.Fatal(err)
		}
		dev, _, err := OpenDevice("cpu", DeviceOptions{CPUWeightFormat: f})
		if err != nil {
			t.Fatal(err)
		}
		m, err := Load(path, "smollm2", OnDevice(dev))
		if err != nil {
			t.Fatal(err)
		}
		pool, err := m.NewKVPool((promptLen+steps)/KVBlockLen + 2)
		if err != nil {
			t.Fatal(err)
		}
		// A 128-token prompt (or TUFT_DECODE_PROMPT's), then 128 steps of one token; the
		// wall time of the steps is what counts.
		prompt := make([]int32, promptLen)
		for i := range prompt {
			prompt[i] = int32(100 + i*37%4000)
		}
		var td *timedDevice
		var cpu time.Duration // the steps' CPU time in the last run
		run := func(reps int) time.Duration {
			var wall time.Duration
			cpu = 0
			for r := 0; r < reps; r++ {
				kc := pool.NewCache()
				seq := []StepSeq{{Cache: kc, Tokens: prompt, Draws: []Draw{{Temperature: 0, TopP: 1}}}}
				var t0 time.Time
				var c0 time.Duration
				for i := 0; i <= steps; i++ {
					if i == 1 {
						t0, c0 = time.Now(), processCPU()
						if td != nil {
							td.on = true
						}
					}
					out, err := m.DecodeStep(ctx, seq)
					if err != nil {
						t.Fatal(err)
					}
					seq[0].Tokens = []int32{out[0].Tokens[0]}
				}
				wall += time.Since(t0)
				cpu += processCPU() - c0
				if td != nil {
					td.on = false
				}
				kc.Release()
			}
			return wall
		}
		run(1)
		var prof *os.File
		if dir := os.Getenv("TUFT_DECODE_PPROF"); dir != "" {
			if prof, err = os.Create(fmt.Sprintf("%s/decode-%s.pprof", dir, name)); err != nil {
				t.Fatal(err)
			}
			if err := pprof.StartCPUProfile(prof); err != nil {
				t.Fatal(err)
			}
		}
		// Untimed first: the figure without the wrapper's calls to time.Now.
		wall := run(reps)
		if prof != nil {
			pprof.StopCPUProfile()
			prof.Close()
		}
		_, perPass := m.WeightBytes()
		n := float64(steps * reps)
		t.Logf("%s: batch 1 %.1f tok/s, %.2f ms a token, %.1f MB a token, %.1f GB/s, %.2f CPU-ms a token", name,
			n/wall.Seconds(), wall.Seconds()*1e3/n, float64(perPass)/1e6, float64(perPass)*n/wall.Seconds()/1e9, cpu.Seconds()*1e3/n)
		if os.Getenv("TUFT_DECODE_TIMED") == "0" {
			pool.Close()
			continue
		}
		td = &timedDevice{Device: m.dev, t: map[string]time.Duration{}, n: map[string]int{}}
		m.dev = td
		wall = run(reps)
		m.dev = td.Device
		var keys []string
		var sum time.Duration
		for k, v := range td.t {
			keys = append(keys, k)
			sum += v
		}
		sort.Slice(keys, func(i, j int) bool { return td.t[keys[i]] > td.t[keys[j]] })
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, "  %-28s %5.1f calls/token %8.1f µs/token %5.1f %%\n", k, float64(td.n[k])/n,
				float64(td.t[k].Microseconds())/n, 100*float64(td.t[k])/float64(wall))
		}
		fmt.Fprintf(&b, "  %-28s %8.1f µs/token %5.1f %%\n", "outside device operations",
			float64((wall-sum).Microseconds())/n, 100*float64(wall-sum)/float64(wall))
		t.Logf("%s timed: %.2f ms a token\n%s", name, wall.Seconds()*1e3/n, b.String())
		pool.Close()
	}
}
func (d *timedDevice) MatMulNTShared(a device.Tensor[float32], outs []device.SharedOut[float32], m, k int) {
	name := "MatMulNTShared"
	for _, o := range outs {
		name += fmt.Sprintf(" %d", o.N)
	}
	defer d.add(name+fmt.Sprintf("×%d", k), time.Now())
	d.Device.MatMulNTShared(a, outs, m, k)
}

// Burst keeps the wrapped device's bursts (device.Burster) under the timing wrapper.
func (d *timedDevice) Burst(f func()) {
	if b, ok := d.Device.(device.Burster); ok {
		b.Burst(f)
		return
	}
	f()
}
