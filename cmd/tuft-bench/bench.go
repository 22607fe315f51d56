package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/cuda"
	"github.com/tuft-go/tuft/engine/kern"
	"github.com/tuft-go/tuft/internal/cli"
)

// `tuft-bench engine` measures the engine on this machine — LoRA training tokens/s,
// sampling tokens/s at batch 1 and 16, peak RSS — beside the same figures from the PyTorch
// reference (tools/torchref/bench.py) run on the same model directory in a subprocess.

const benchPromptTokens = 32

// benchPresetInChild writes the preset in a child `tuft-bench write-preset` so that
// generating the weights does not count towards this process's peak RSS. Tests (whose
// binary is not tuft-bench) write it in-process.
var benchPresetInChild = true

type benchOptions struct {
	modelFlags
	tokens, rank, steps int
	adapters            int // the multi-adapter training figure's adapters (bench_multi.go); < 2: none
	sampleTokens        int
	batches             []int
	device              string
	cudaLibDirs         string
	cudaGraphs          bool // engine.cuda_graphs
	cudaGEMV            bool // engine.cuda_gemv
	// weights is the engine's CPU weight format (--weights): QLoRA's speed and memory on
	// a quantised base; PyTorch is compared only in f32.
	weights string
	torchFlags
	jsonOut bool
	seed    int64
	// prepackBytes is engine.cpu_prepack_bytes (--prepack-bytes).
	prepackBytes int64
	// interleave alternates the CPU reference's training steps with the engine's
	// (bench_paced.go); false runs all of one side's steps, then the other's.
	interleave bool
	// cpuProfile is where the engine's timed training steps' CPU profile is written
	// (--cpuprofile): where a step's time goes, without the set-up, the machine figures,
	// sampling or the reference.
	cpuProfile string
}

// benchTrain is the training figure of one implementation.
type benchTrain struct {
	Tokens     int       `json:"tokens"`
	Steps      int       `json:"steps"`
	StepS      []float64 `json:"step_s"`
	MedianS    float64   `json:"median_s"`
	TokensPerS float64   `json:"tokens_per_s"`
	FirstLoss  float64   `json:"first_loss"`                 // warm-up step's loss per token (sanity check)
	FwdBwdS    float64   `json:"fwd_bwd_median_s,omitempty"` // median of forward+backward alone
	// GEMMFraction is the step's FLOPs (loraStepFLOPs) over the median step time, over the
	// machine's measured GEMM peak (CPU runs only).
	GEMMFraction float64 `json:"gemm_fraction,omitempty"`
	// GEMMBeside is the GEMM peak probe's GFLOP/s measured right after each timed step
	// (CPU runs of the engine), and GEMMFractionBeside the median over the steps of each
	// step's share of the probe beside it: on a shared machine whose speed moves by a
	// quarter from minute to minute, the share of what the cores gave at that moment,
	// where GEMMFraction divides the median step by the best probe of the whole run.
	GEMMBeside         []float64 `json:"gemm_beside_gflops,omitempty"`
	GEMMFractionBeside float64   `json:"gemm_fraction_beside,omitempty"`
}

// benchSample is one sampling figure (prefill of the prompt included in Seconds).
type benchSample struct {
	Batch        int     `json:"batch"`
	OutputTokens int     `json:"output_tokens"`
	Seconds      float64 `json:"seconds"`
	TokensPerS   float64 `json:"tokens_per_s"`
}

// benchSide is everything one implementation reports (Go or PyTorch: same JSON shape).
type benchSide struct {
	Impl         string  `json:"impl"`
	Device       string  `json:"device,omitempty"`          // where it computed
	DevicePeakMi float64 `json:"device_peak_mib,omitempty"` // GPU memory high-water mark
	// DeviceGEMMTFlops is the GPU's bfloat16 product rate measured in the engine's process
	// after its figures (deviceGEMMPeak): the ceiling both sides' GEMMFraction (MFU) divide by.
	DeviceGEMMTFlops float64       `json:"device_gemm_tflops,omitempty"`
	TorchVersion     string        `json:"torch_version,omitempty"`
	Python           string        `json:"python,omitempty"`
	Threads          int           `json:"threads"`
	LoadS            float64       `json:"load_s"`
	Train            benchTrain    `json:"train"`
	Sample           []benchSample `json:"sample"`
	PeakRSSMiB       float64       `json:"peak_rss_mib"`
	// PackedMiB is the base weights' GEMM panels the engine kept (engine.cpu_prepack_bytes),
	// part of its peak RSS.
	PackedMiB float64     `json:"packed_weights_mib,omitempty"`
	BLAS      *torchBLAS  `json:"blas,omitempty"`          // the reference's BLAS (CPU reference only)
	Multi     *benchMulti `json:"multi_adapter,omitempty"` // Go only (bench_multi.go)
}

func (s *benchSide) sample(batch int) *benchSample {
	for i := range s.Sample {
		if s.Sample[i].Batch == batch {
			return &s.Sample[i]
		}
	}
	return nil
}

type benchReport struct {
	Preset       string             `json:"preset,omitempty"`
	ModelDir     string             `json:"model_dir"`
	Arch         string             `json:"arch"`
	Layers       int                `json:"layers"`
	Hidden       int                `json:"hidden"`
	Vocab        int                `json:"vocab"`
	Tokens       int                `json:"tokens"`
	Rank         int                `json:"rank"`
	Targets      []string           `json:"lora_targets"`
	Steps        int                `json:"steps"`
	Batches      []int              `json:"batches"`
	PromptTokens int                `json:"prompt_tokens"`
	SampleTokens int                `json:"sample_tokens"`
	CPUs         int                `json:"cpus"`
	GOOS         string             `json:"goos"`
	GOARCH       string             `json:"goarch"`
	Go           benchSide          `json:"go"`
	Torch        *benchSide         `json:"torch"`
	TorchSkipped string             `json:"torch_skipped,omitempty"`
	TorchPython  string             `json:"torch_python,omitempty"`
	Ratios       map[string]float64 `json:"ratios_go_over_torch,omitempty"`
	GoGEMMGFlops float64            `json:"go_gemm_gflops,omitempty"`
	Machine      *machineFigures    `json:"machine,omitempty"` // CPU runs: bandwidth and GEMM peak
	TrainFLOPs   float64            `json:"train_step_flops,omitempty"`
	Weights      string             `json:"weights"` // the engine's CPU weight format
	// Interleaved: the two sides' training steps were taken in turn (bench_paced.go).
	Interleaved bool `json:"interleaved"`
	// RatiosRefused says why no ratio is printed: the reference ran on a crippled BLAS.
	RatiosRefused string `json:"ratios_refused,omitempty"`
}

func runBench(args []string, stdout, stderr io.Writer) error {
	v, args, err := verb(args, "engine", "sampling", "load")
	if err != nil {
		return err
	}
	if v == "sampling" {
		return runBenchSampling(args, stdout, stderr)
	}
	if v == "load" {
		return runBenchLoad(args, stdout, stderr) // bench_load.go
	}
	fs := cli.NewFlags("bench engine", "tuft-bench engine [--preset NAME | --model DIR] [--device cpu|cuda[:N]] [--tokens N] [--rank R] [--steps N] [--adapters N] [--sample-tokens N] [--batches 1,16] [--torch auto|on|off] [--threads N] [--cpuprofile FILE] [--json]\n"+
		"       tuft-bench engine --reference llama.cpp [--model FILE.gguf] [--weights f32|bf16|q8_0|q4_1|q4_k] [--tuft-weights F] [--new-tokens N] [--pp-tokens N] [--batches 1,16] [--threads N] [--json]",
		"Measure training and sampling speed and peak memory of the Go engine, against PyTorch on the same model when available;\n"+
			"or, with --reference llama.cpp, prompt processing and decode against llama.cpp on the same GGUF file.\n"+
			"Both first measure the machine: memory bandwidth and GEMM peak, which every figure is also printed as a fraction of.")
	var o benchOptions
	var lo llamaOptions
	reference := fs.String("reference", "torch", "what to compare with: torch (PyTorch, training and sampling) or llama.cpp (inference on a GGUF file)")
	fs.StringVar(&lo.weights, "weights", "f32", "precision both sides compute with: "+strings.Join(weightFormats, ", ")+" (llama.cpp's file is converted to it; with torch: f32 compares with PyTorch, another format runs the engine alone on that base, QLoRA)")
	fs.StringVar(&lo.tuftWeights, "tuft-weights", "", "--reference llama.cpp: tuft's format when it differs from --weights (tuft on its own copy of the same source), e.g. q4_1 against llama.cpp's q4_k (Q4_K_M)")
	threads := fs.Int("threads", 0, "threads for the engine and the reference (GOMAXPROCS; 0 keeps the runtime's)")
	fs.IntVar(&lo.newTokens, "new-tokens", 128, "--reference llama.cpp: decode steps after the 8-token prompt")
	fs.IntVar(&lo.ppTokens, "pp-tokens", 128, "--reference llama.cpp: prompt-processing length")
	fs.IntVar(&lo.repeats, "repeats", 3, "--reference llama.cpp: prompt-processing runs (the best is reported)")
	fs.StringVar(&lo.python, "llamacpp-python", "", "--reference llama.cpp: Python with llama_cpp, gguf, numpy (default: the venv scripts/llamacpp.sh builds)")
	fs.StringVar(&lo.script, "llamacpp-script", "", "--reference llama.cpp: path of tools/llamacppref/bench.py (default: found from the working directory)")
	o.modelFlags.register(fs)
	fs.IntVar(&o.tokens, "tokens", 512, "tokens in the training datum")
	fs.IntVar(&o.rank, "rank", 16, "LoRA rank (alpha = rank) on q, k, v, o, gate, up, down")
	fs.IntVar(&o.adapters, "adapters", 16, "adapters of the multi-adapter training figure: one step of N adapters × tokens/N against one adapter × tokens (0: skip)")
	fs.IntVar(&o.steps, "steps", 5, "timed training steps (after one warm-up step); the median is reported")
	fs.Int64Var(&o.prepackBytes, "prepack-bytes", config.Default("").Engine.CPUPrepackBytes, "CPU: bytes of base-weight GEMM panels kept packed for training and prefill (engine.cpu_prepack_bytes; 0: every product packs its weight)")
	fs.BoolVar(&o.interleave, "interleave", true, "CPU: both sides loaded at once, their training steps taken in turn (engine then PyTorch, then PyTorch then engine), each timed step after an untimed one that re-warms the caches, so machine noise lands on both; false: all of the engine's steps, then all of PyTorch's, each side alone in memory")
	fs.IntVar(&o.sampleTokens, "sample-tokens", 64, "new tokens to sample after a 32-token prompt")
	batches := fs.String("batches", "1,16", "sampling batch sizes (comma-separated)")
	fs.StringVar(&o.cudaLibDirs, "cuda-lib-dirs", "", "directories searched first for libcuda and cuBLAS (as engine.cuda_lib_dirs; separated by "+string(filepath.ListSeparator)+")")
	fs.StringVar(&o.device, "device", "cpu", "device of the Go engine: cpu, cuda, cuda:N or auto; with cuda the reference is PyTorch+PEFT on the GPU (tools/torchref/bench_peft.py)")
	o.torchFlags.register(fs, "tools/torchref/bench.py, or bench_peft.py with --device cuda")
	fs.Int64Var(&o.seed, "seed", 0, "seed of the LoRA initialisation and of sampling")
	fs.BoolVar(&o.cudaGraphs, "cuda-graphs", config.Default("").Engine.CUDAGraphs, "decode steps as CUDA graphs (engine.cuda_graphs)")
	fs.BoolVar(&o.cudaGEMV, "cuda-gemv", config.Default("").Engine.CUDAGEMV, "batch-1 products with bfloat16 weights by the engine's kernel, not cuBLAS (engine.cuda_gemv)")
	fs.BoolVar(&o.jsonOut, "json", false, "print JSON instead of a table")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile (pprof) of the engine's timed training steps to this file (go tool pprof -top FILE)")
	if err := fs.ParseArgs(args); err != nil {
		return err
	}
	for _, f := range strings.Split(*batches, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || b < 1 {
			return fmt.Errorf("--batches %q: want positive integers separated by commas", *batches)
		}
		o.batches = append(o.batches, b)
	}
	if _, _, err := engine.ParseDevice(o.device); err != nil {
		return fmt.Errorf("--device: %w", err)
	}
	if lo.weights, err = weightFormat(lo.weights); err != nil {
		return &cli.UsageError{Err: err, Usage: fs.UsageText()}
	}
	if lo.tuftWeights != "" {
		if lo.tuftWeights, err = weightFormat(lo.tuftWeights); err != nil {
			return &cli.UsageError{Err: fmt.Errorf("--tuft-weights: %w", err), Usage: fs.UsageText()}
		}
	}
	if *threads < 0 {
		return &cli.UsageError{Err: fmt.Errorf("--threads %d: want ≥ 0", *threads), Usage: fs.UsageText()}
	}
	if *threads > 0 {
		runtime.GOMAXPROCS(*threads)
	}
	switch *reference {
	case "llama.cpp":
		if len(o.batches) != 2 || o.batches[0] != 1 {
			return &cli.UsageError{Err: fmt.Errorf("--reference llama.cpp: --batches must be 1,B (batch 1 and one larger batch), not %q", *batches), Usage: fs.UsageText()}
		}
		if o.device != "cpu" || fs.NArg() > 0 || lo.newTokens < 1 || lo.ppTokens < 1 || lo.repeats < 1 {
			return &cli.UsageError{Err: errors.New("--reference llama.cpp: CPU only, no arguments; --new-tokens, --pp-tokens, --repeats ≥ 1"), Usage: fs.UsageText()}
		}
		lo.model, lo.batch, lo.jsonOut = o.modelDir, o.batches[1], o.jsonOut
		return runBenchLlama(lo, stdout, stderr)
	case "torch":
		if err := tuftHasWeights(lo.weights); err != nil {
			return err
		}
		if lo.weights != "f32" && o.torch == "on" {
			return fmt.Errorf("--weights %s: the PyTorch reference computes in f32 only; use --torch off (the engine alone, QLoRA on a %s base) or --reference llama.cpp", lo.weights, lo.weights)
		}
		if lo.weights != "f32" && o.device != "cpu" {
			return fmt.Errorf("--weights %s: a CPU weight format; --device %s keeps its own", lo.weights, o.device)
		}
		o.weights = lo.weights
	default:
		return &cli.UsageError{Err: fmt.Errorf("--reference %q: want torch or llama.cpp", *reference), Usage: fs.UsageText()}
	}
	switch {
	case o.tokens < 2 || o.rank < 1 || o.steps < 1 || o.sampleTokens < 1:
		return fmt.Errorf("--tokens must be ≥ 2 and --rank, --steps, --sample-tokens ≥ 1")
	case o.prepackBytes < 0:
		return fmt.Errorf("--prepack-bytes %d: want ≥ 0", o.prepackBytes)
	case o.adapters < 0 || o.adapters > o.tokens:
		return fmt.Errorf("--adapters %d: want 0 (skip) to --tokens (%d)", o.adapters, o.tokens)
	case o.checkMode() != nil:
		return o.checkMode()
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	logf := progressLog(stderr)

	rep := benchReport{Tokens: o.tokens, Rank: o.rank, Steps: o.steps, Batches: o.batches, PromptTokens: benchPromptTokens,
		SampleTokens: o.sampleTokens, CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}
	dir, preset, cleanup, err := o.open(logf)
	if err != nil {
		return err
	}
	defer cleanup()
	rep.Preset, rep.ModelDir = preset, dir

	rep.Weights = o.weights
	// Find the reference before the long Go run, so a misconfiguration fails fast.
	python, script, skipped, err := "", "", "", error(nil)
	if o.weights == "f32" {
		python, script, skipped, err = o.reference(func(python, script string) (string, string, string) {
			return findTorchRef(python, script, gpuDevice(o.device))
		})
		if err != nil {
			return err
		}
	} else {
		skipped = fmt.Sprintf("--weights %s: PyTorch computes in f32 only (the engine alone: LoRA on a %s base)", o.weights, o.weights)
	}
	rep.TorchSkipped = skipped

	if !gpuDevice(o.device) {
		logf("measuring the machine (memory bandwidth, GEMM peak)")
		mf := measureMachine()
		rep.Machine = &mf
		printMachine(stderr, mf)
		rep.GoGEMMGFlops = goGEMMGFlops()
		logf("Go GEMM (1024×1024×1024 float32): %.1f GFLOP/s", rep.GoGEMMGFlops)
	}
	var paced *pacedRef
	var turn func(step int)
	if python != "" && o.interleave && !gpuDevice(o.device) {
		logf("starting the PyTorch reference: its training steps alternate with the engine's")
		paced, err = startPacedRef(python, append(torchArgs(script, dir, o), "--paced"), stderr)
		if err != nil {
			if o.torch == "on" {
				return err
			}
			rep.TorchSkipped, python = "reference run failed: "+err.Error(), ""
		} else {
			defer paced.stop()
			turn = paced.step
			rep.Interleaved = true
		}
	}
	goSide, m, err := benchGo(context.Background(), dir, o, logf, turn)
	if err != nil {
		return err
	}
	rep.Go = *goSide
	rep.Arch, rep.Layers, rep.Hidden, rep.Vocab = m.Cfg.Arch, m.Cfg.Layers, m.Cfg.Hidden, m.Cfg.VocabSize
	rep.TrainFLOPs = loraStepFLOPs(m.Cfg, o.tokens, o.rank)
	m = nil
	runtime.GC()

	if python != "" {
		rep.TorchPython = python
		ts, err := benchTorch(python, script, dir, o, paced, stderr)
		if err != nil {
			if o.torch == "on" {
				return err
			}
			rep.TorchSkipped = "reference run failed: " + err.Error()
		} else {
			rep.Torch = ts
			why := ""
			if !gpuDevice(o.device) {
				if ts.BLAS == nil {
					why = "the reference did not say which BLAS it runs on"
				} else {
					why = crippledReference(*ts.BLAS, rep.GoGEMMGFlops)
				}
			}
			if why != "" {
				if o.torch == "on" {
					return fmt.Errorf("PyTorch reference refused: %s", why)
				}
				rep.RatiosRefused = why
			} else {
				rep.Ratios = benchRatios(goSide, ts)
			}
		}
	}
	if rep.Machine != nil {
		logf("measuring the machine again (the best of both measurements is kept)")
		rep.Machine.remeasure()
	}
	if rep.Machine != nil || rep.Go.DeviceGEMMTFlops > 0 {
		gemmFraction(&rep.Go, &rep)
		if rep.Torch != nil {
			gemmFraction(rep.Torch, &rep)
		}
	}
	return writeReport(stdout, o.jsonOut, &rep, printBench)
}

func benchWritePreset(name, dir string) error {
	if benchPresetInChild {
		if exe, err := os.Executable(); err == nil {
			out, err := exec.Command(exe, writePresetVerb, name, dir).CombinedOutput()
			if err != nil {
				return fmt.Errorf("tuft-bench %s: %v\n%s", writePresetVerb, err, out)
			}
			return nil
		}
	}
	return engine.WritePreset(name, dir)
}

// benchTokens are deterministic token ids; tools/torchref/bench.py uses the same formula, so
// both sides train on (and prompt with) the same tokens.
func benchTokens(n, vocab, salt int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32((i*7919 + salt) % vocab)
	}
	return out
}

// gpuDevice reports whether a --device value names a GPU (its reference is then the
// PyTorch+PEFT script on the GPU).
func gpuDevice(d string) bool { return strings.HasPrefix(d, "cuda") }

// benchGo loads the model and measures the engine. turn, when not nil, runs the
// reference's training step i (0: its warm-up): after the engine's step i when i is even,
// before it when i is odd, so each side goes first as often; each timed step after the
// warm-up then follows an untimed one on its own side (a CPU profile includes those).
func benchGo(ctx context.Context, dir string, o benchOptions, logf func(string, ...any), turn func(i int)) (*benchSide, *engine.Model, error) {
	side := &benchSide{Impl: "go", Threads: runtime.GOMAXPROCS(0)}
	dopts := engine.DeviceOptions{CUDALibDirs: filepath.SplitList(o.cudaLibDirs), CUDAGraphs: o.cudaGraphs, CUDAGraphsMax: config.Default("").Engine.CUDAGraphsMax, CUDANoGEMV: !o.cudaGEMV,
		CPUPrepackBytes: o.prepackBytes}
	if o.weights != "" {
		f, err := engine.ParseWeightFormat(o.weights)
		if err != nil {
			return nil, nil, fmt.Errorf("--weights: %w", err)
		}
		dopts.CPUWeightFormat = f
	}
	dev, why, err := engine.OpenDevice(o.device, dopts)
	if err != nil {
		return nil, nil, err
	}
	side.Device = dev.Name()
	logf("device %s (%s)", dev.Name(), why)
	t0 := time.Now()
	m, err := engine.Load(dir, "bench", engine.OnDevice(dev))
	if err != nil {
		return nil, nil, err
	}
	side.LoadS = time.Since(t0).Seconds()
	logf("loaded %s in %.2fs", dir, side.LoadS)
	if o.tokens > m.Cfg.MaxPositions || benchPromptTokens+o.sampleTokens > m.Cfg.MaxPositions {
		return nil, nil, fmt.Errorf("the model has %d positions: --tokens %d or 32 + --sample-tokens %d is too many", m.Cfg.MaxPositions, o.tokens, o.sampleTokens)
	}
	// Generate exactly --sample-tokens tokens, as the reference does: no stop at EOS.
	m.Cfg.EOSTokenIDs = nil

	a, err := m.NewAdapter(engine.LoraConfig{Rank: o.rank, Alpha: float64(o.rank), Seed: o.seed, TrainAttn: true, TrainMLP: true})
	if err != nil {
		return nil, nil, err
	}
	toks := benchTokens(o.tokens+1, m.Cfg.VocabSize, 13)
	targets := make([]int64, o.tokens)
	for i := range targets {
		targets[i] = int64(toks[i+1])
	}
	req := engine.ForwardRequest{LossFn: "cross_entropy", Backward: true, Data: []engine.Datum{{
		Tokens:     toks[:o.tokens],
		LossInputs: map[string]engine.Tensor{"target_tokens": {DType: engine.Int64, Shape: []int{o.tokens}, I64: targets}},
	}}}
	adam := engine.AdamParams{LearningRate: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
	tr := benchTrain{Tokens: o.tokens, Steps: o.steps}
	var fb []float64
	var prof *os.File
	if o.cpuProfile != "" {
		if prof, err = os.Create(o.cpuProfile); err != nil {
			return nil, nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		defer prof.Close()
	}
	for step := 0; step <= o.steps; step++ {
		if step == 1 && prof != nil {
			if err := pprof.StartCPUProfile(prof); err != nil {
				return nil, nil, fmt.Errorf("--cpuprofile: %w", err)
			}
			defer pprof.StopCPUProfile() // on an error return; stopped below otherwise
		}
		if turn != nil && step%2 == 1 {
			turn(step)
		}
		if turn != nil && step > 0 {
			// The reference's step evicted the engine's data from the caches (a step after
			// 800 MB of other writes ran 8 % slower in-process): an untimed step first, so
			// the timed one runs as back-to-back training steps do. The reference does the same.
			if _, err := m.ForwardBackward(ctx, a, req); err != nil {
				return nil, nil, err
			}
			if _, err := m.OptimStep(ctx, a, adam); err != nil {
				return nil, nil, err
			}
		}
		t := time.Now()
		res, err := m.ForwardBackward(ctx, a, req)
		if err != nil {
			return nil, nil, err
		}
		tfb := time.Since(t).Seconds()
		if _, err := m.OptimStep(ctx, a, adam); err != nil {
			return nil, nil, err
		}
		dt := time.Since(t).Seconds()
		if step == 0 {
			tr.FirstLoss = res.Metrics["loss:sum"] / float64(o.tokens)
			logf("train warm-up step %.2fs, loss/token %.6f", dt, tr.FirstLoss)
		} else {
			tr.StepS, fb = append(tr.StepS, dt), append(fb, tfb)
			msg := fmt.Sprintf("train step %d/%d %.2fs", step, o.steps, dt)
			if !gpuDevice(o.device) {
				g := gemmGFlops(gemmPeakN, besideRepeats, true)
				tr.GEMMBeside = append(tr.GEMMBeside, g)
				msg += fmt.Sprintf(" (GEMM probe after it: %.1f GFLOP/s)", g)
			}
			logf("%s", msg)
		}
		if turn != nil && step%2 == 0 {
			turn(step) // a profile samples this process's CPU time: the reference's step adds none
		}
	}
	if prof != nil {
		pprof.StopCPUProfile()
		if err := prof.Close(); err != nil {
			return nil, nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		logf("CPU profile of the timed steps written to %s", o.cpuProfile)
	}
	tr.MedianS, tr.FwdBwdS = median(tr.StepS), median(fb)
	tr.TokensPerS = float64(o.tokens) / tr.MedianS
	side.Train = tr

	prompt := benchTokens(benchPromptTokens, m.Cfg.VocabSize, 101)
	for _, batch := range o.batches {
		seed := o.seed
		t := time.Now()
		res, err := m.Sample(ctx, &a.W, engine.SampleRequest{Prompt: prompt, NumSamples: batch,
			Params: engine.SampleParams{MaxTokens: o.sampleTokens, Temperature: 1, TopK: -1, TopP: 1, Seed: &seed}})
		if err != nil {
			return nil, nil, err
		}
		dt := time.Since(t).Seconds()
		side.Sample = append(side.Sample, benchSample{Batch: batch, OutputTokens: res.OutputTokens, Seconds: dt,
			TokensPerS: float64(res.OutputTokens) / dt})
		logf("sample batch %d: %d tokens in %.2fs", batch, res.OutputTokens, dt)
	}
	// The peak is read before the multi-adapter figure, whose extra adapters and batch
	// shapes the reference does not run: it compares the same work on both sides.
	side.PeakRSSMiB = maxRSSMiB()
	side.PackedMiB = float64(kern.PackedBytes()) / (1 << 20)
	if s, ok := dev.(interface{ Stats() cuda.Stats }); ok {
		side.DevicePeakMi = float64(s.Stats().Peak) / (1 << 20)
	}
	if o.adapters > 1 {
		if side.Multi, err = benchMultiTrain(ctx, m, o, tr, logf); err != nil {
			return nil, nil, err
		}
	}
	if err := finishDevice(dev, o, side, logf); err != nil {
		return nil, nil, err
	}
	return side, m, nil
}

// benchTorch is the reference's figures: from paced, already running, when it is not nil,
// else from a run of its own.
func benchTorch(python, script, dir string, o benchOptions, paced *pacedRef, stderr io.Writer) (*benchSide, error) {
	var ts benchSide
	var last string
	var err error
	if paced != nil {
		last, err = paced.result(&ts)
	} else {
		last, err = runReference(python, torchArgs(script, dir, o), stderr, &ts)
	}
	if err != nil {
		return nil, err
	}
	if ts.Train.TokensPerS <= 0 || len(ts.Train.StepS) != o.steps {
		return nil, errors.New("reference output lacks figures: " + last)
	}
	for _, b := range o.batches {
		if ts.sample(b) == nil {
			return nil, fmt.Errorf("reference output lacks sampling at batch %d: %s", b, last)
		}
	}
	return &ts, nil
}

// torchArgs is the reference's command line (after the interpreter).
func torchArgs(script, dir string, o benchOptions) []string {
	args := []string{script, "--model", dir, "--tokens", fmt.Sprint(o.tokens), "--rank", fmt.Sprint(o.rank),
		"--steps", fmt.Sprint(o.steps), "--sample-tokens", fmt.Sprint(o.sampleTokens), "--prompt-tokens", fmt.Sprint(benchPromptTokens),
		"--seed", fmt.Sprint(o.seed), "--threads", fmt.Sprint(runtime.GOMAXPROCS(0)), "--batch"}
	for _, b := range o.batches {
		args = append(args, fmt.Sprint(b))
	}
	if gpuDevice(o.device) {
		_, ord, _ := engine.ParseDevice(o.device)
		args = append(args, "--device", fmt.Sprintf("cuda:%d", ord))
	}
	return args
}

func benchRatios(g, t *benchSide) map[string]float64 {
	r := map[string]float64{}
	div := func(k string, a, b float64) {
		if b > 0 {
			r[k] = a / b
		}
	}
	div("train_tokens_per_s", g.Train.TokensPerS, t.Train.TokensPerS)
	for _, s := range g.Sample {
		b := s.Batch
		if gs, ts := g.sample(b), t.sample(b); gs != nil && ts != nil {
			div(fmt.Sprintf("sample_b%d_tokens_per_s", b), gs.TokensPerS, ts.TokensPerS)
		}
	}
	div("peak_rss_mib", g.PeakRSSMiB, t.PeakRSSMiB)
	div("device_peak_mib", g.DevicePeakMi, t.DevicePeakMi)
	return r
}
