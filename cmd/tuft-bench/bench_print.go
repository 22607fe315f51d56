package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// The engine bench's table (printBench): the report as a human reads it; --json prints
// the report itself.

// printBench writes r as a table, the ratios and the machine figures beside each side.
func printBench(w io.Writer, r *benchReport) {
	name := r.Preset
	if name == "" {
		name = r.ModelDir
	}
	fmt.Fprintf(w, "tuft-bench engine: %s (%s, %d layers, hidden %d, vocab %d) on %s\n", name, r.Arch, r.Layers, r.Hidden, r.Vocab, r.Go.Device)
	if r.Weights != "" && r.Weights != "f32" {
		fmt.Fprintf(w, "base weights %s (QLoRA: the base widened per tile; adapter, gradients and AdamW state float32)\n", r.Weights)
	}
	fmt.Fprintf(w, "LoRA rank %d (alpha %d) on %s; %s/%s, %d CPUs, GOMAXPROCS %d\n", r.Rank, r.Rank,
		strings.Join(r.Targets, ","), r.GOOS, r.GOARCH, r.CPUs, r.Go.Threads)
	if r.Machine != nil {
		printMachine(w, *r.Machine)
	}
	t := r.Torch
	if t != nil {
		fmt.Fprintf(w, "reference: %s, PyTorch %s (%s, Python %s), %d threads", t.Impl, t.TorchVersion, r.TorchPython, t.Python, t.Threads)
		if t.Device != "" {
			fmt.Fprintf(w, ", on %s", t.Device)
		}
		fmt.Fprintln(w)
		if r.Interleaved {
			fmt.Fprintln(w, "training steps in turn: engine then PyTorch, then PyTorch then engine, each timed step after an untimed one (both loaded; --interleave=false runs each side alone)")
		}
		if b := t.BLAS; b != nil {
			fmt.Fprintf(w, "GEMM 1024³ float32: Go %.1f GFLOP/s; PyTorch %.1f GFLOP/s on BLAS %s (%s)\n", r.GoGEMMGFlops, b.GEMMGFlops, b.describe(), b.Library)
		}
		if r.RatiosRefused != "" {
			fmt.Fprintf(w, "Go/PyTorch ratios not printed: %s\n", r.RatiosRefused)
		}
	} else {
		fmt.Fprintf(w, "reference: PyTorch skipped: %s\n", r.TorchSkipped)
	}
	type row struct{ label, g, t, ratio string }
	f1 := func(x float64) string { return fmt.Sprintf("%.1f", x) }
	rows := []row{{"", "Go (tuft)", "PyTorch", "Go/PyTorch"}}
	add := func(label string, g float64, tv func(*benchSide) float64, ratio string, format func(float64) string) {
		rw := row{label: label, g: format(g)}
		if t != nil {
			rw.t = format(tv(t))
			if ratio != "" {
				rw.ratio = fmtRatio(r.Ratios[ratio])
			}
		}
		rows = append(rows, rw)
	}
	add(fmt.Sprintf("train tokens/s (%d tok, fwd+bwd+AdamW, median of %d)", r.Tokens, r.Steps), r.Go.Train.TokensPerS,
		func(s *benchSide) float64 { return s.Train.TokensPerS }, "train_tokens_per_s", f1)
	for _, b := range r.Batches {
		if gs := r.Go.sample(b); gs != nil {
			add(fmt.Sprintf("sample tokens/s, batch %d (%d new each)", b, r.SampleTokens), gs.TokensPerS,
				func(s *benchSide) float64 {
					if x := s.sample(b); x != nil {
						return x.TokensPerS
					}
					return 0
				}, fmt.Sprintf("sample_b%d_tokens_per_s", b), f1)
		}
	}
	if r.Go.DeviceGEMMTFlops > 0 && r.Machine == nil && r.TrainFLOPs > 0 {
		add(fmt.Sprintf("train step, share of the card's bf16 GEMM, %.0f TFLOP/s (MFU; %.1f TFLOP per step)", r.Go.DeviceGEMMTFlops, r.TrainFLOPs/1e12),
			r.Go.Train.GEMMFraction, func(s *benchSide) float64 { return s.Train.GEMMFraction }, "", func(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) })
	}
	if r.Machine != nil && r.TrainFLOPs > 0 {
		add(fmt.Sprintf("train step, share of the GEMM peak (%.1f GFLOP per step)", r.TrainFLOPs/1e9), r.Go.Train.GEMMFraction,
			func(s *benchSide) float64 { return s.Train.GEMMFraction }, "", func(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) })
		if r.Go.Train.GEMMFractionBeside > 0 {
			add("  each step's share of the GEMM probe run after it (median)", r.Go.Train.GEMMFractionBeside,
				func(s *benchSide) float64 { return s.Train.GEMMFractionBeside }, "", func(x float64) string {
					if x == 0 {
						return "-"
					}
					return fmt.Sprintf("%.1f%%", 100*x)
				})
		}
	}
	add("peak RSS, MiB (lower is better)", r.Go.PeakRSSMiB, func(s *benchSide) float64 { return s.PeakRSSMiB }, "peak_rss_mib",
		func(x float64) string { return fmt.Sprintf("%.0f", x) })
	if r.Go.DevicePeakMi > 0 {
		add("peak GPU memory, MiB (lower is better)", r.Go.DevicePeakMi, func(s *benchSide) float64 { return s.DevicePeakMi }, "device_peak_mib",
			func(x float64) string { return fmt.Sprintf("%.0f", x) })
	}
	rows = append(rows, row{})
	add("train step, s (median)", r.Go.Train.MedianS, func(s *benchSide) float64 { return s.Train.MedianS }, "",
		func(x float64) string { return fmt.Sprintf("%.3f", x) })
	lossLabel := "warm-up step loss/token"
	if t != nil {
		lossLabel += " (must agree)"
	}
	add(lossLabel, r.Go.Train.FirstLoss, func(s *benchSide) float64 { return s.Train.FirstLoss }, "",
		func(x float64) string { return fmt.Sprintf("%.6f", x) })
	add("model load, s", r.Go.LoadS, func(s *benchSide) float64 { return s.LoadS }, "",
		func(x float64) string { return fmt.Sprintf("%.2f", x) })
	width := 0
	for _, rw := range rows {
		width = max(width, len(rw.label))
	}
	fmt.Fprintln(w)
	for _, rw := range rows {
		line := fmt.Sprintf("%-*s  %10s", width, rw.label, rw.g)
		if t != nil {
			line += fmt.Sprintf("  %10s  %10s", rw.t, rw.ratio)
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	fmt.Fprintln(w)
	printMulti(w, r)
	if t != nil {
		fmt.Fprintln(w, "Go/PyTorch: throughput above 1 means Go is faster; peak RSS below 1 means Go uses less memory.")
	}
	fmt.Fprintln(w, "Sampling: time includes the 32-token prompt prefill; temperature 1, fixed seed, no stop at EOS.")
	if gpuDevice(r.Go.Device) {
		fmt.Fprintln(w, "GPU: base weights bfloat16 on both sides; the reference trains with PEFT and samples with HF generate.")
	}
	fmt.Fprintln(w, "Peak RSS: each process's own VmHWM (PyTorch's includes importing torch)"+rssProbeNote(r.Machine)+".")
	if r.Go.PackedMiB > 0 {
		fmt.Fprintf(w, "Engine RSS includes %.0f MiB of base-weight GEMM panels kept packed (engine.cpu_prepack_bytes; --prepack-bytes 0: none).\n", r.Go.PackedMiB)
	}
}

// rssProbeNote says, where the peak could not be restarted after the machine probe, that
// the engine's peak RSS includes the probe's bandwidth buffers.
func rssProbeNote(m *machineFigures) string {
	if m == nil || m.PeakRSSReset {
		return ""
	}
	return fmt.Sprintf("; tuft's includes the bandwidth probe's 2 × %d MiB (the peak could not be restarted here)", m.BufferMiB)
}

func fmtRatio(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x)
}

// median is the middle of xs (the mean of the two middle ones for an even count).
func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
