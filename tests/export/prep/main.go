// Command prep makes the export suite's inputs and our engine's reference answers:
//
//	prep train -model DIR -work DIR [-lr LR]   trains two adapters a few steps (so their LoRA is not
//	                                  zero): WORK/ckpt (attention and MLP) and WORK/ckpt-lmhead
//	                                  (also lm_head), checkpoints as the server saves them
//	prep ref -model DIR [-adapter DIR] -out FILE
//	                                  the engine's per-token log-probabilities of a probe text
//	                                  and its greedy continuation of a prompt, as JSON
//
// With no -model, train writes the built-in tiny preset into WORK/base and uses it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tuft-go/tuft/engine"
)

const (
	trainText = "The capital of France is Paris. The quick brown fox jumps over the lazy dog. Hello, world!"
	probeText = "A model learns from the data it is given, one token at a time. The capital of France is"
	prompt    = "The quick brown fox"
	greedyLen = 16
)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: prep train|ref [flags]"))
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	model := fs.String("model", "", "base model directory")
	work := fs.String("work", "", "work directory (train)")
	adapter := fs.String("adapter", "", "checkpoint directory (ref)")
	out := fs.String("out", "", "reference JSON (ref)")
	// 1e-2 on the tiny preset: at 2e-2 its 20 steps were chaotic (the loss jumping 177 →
	// 361 → 193), so rounding-level changes to training moved the final adapter far, and
	// the merged bf16 export's distance from base + adapter with it (0.004–0.61 for lr
	// 1.5e-2–2.2e-2 against 0.003–0.03 for 0.8e-2–1.2e-2).
	lr := fs.Float64("lr", 1e-2, "AdamW learning rate of the 20 training steps (train; a pretrained model wants ~1e-3)")
	_ = fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "train":
		err = train(*model, *work, *lr)
	case "ref":
		err = ref(*model, *adapter, *out)
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "prep:", err)
	os.Exit(1)
}

func encode(m *engine.Model, s string) ([]int32, error) {
	if m.Tok == nil {
		return nil, fmt.Errorf("model %s has no tokenizer", m.Name)
	}
	return m.Tok.Encode(s)
}

func train(modelDir, work string, lr float64) error {
	if modelDir == "" {
		modelDir = filepath.Join(work, "base")
		if err := engine.WritePreset("tiny", modelDir); err != nil {
			return err
		}
	}
	m, err := engine.Load(modelDir, "base")
	if err != nil {
		return err
	}
	toks, err := encode(m, trainText)
	if err != nil {
		return err
	}
	tgt := make([]int64, len(toks)-1)
	for i := range tgt {
		tgt[i] = int64(toks[i+1])
	}
	req := engine.ForwardRequest{LossFn: "cross_entropy", Backward: true, Data: []engine.Datum{{Tokens: toks[:len(toks)-1],
		LossInputs: map[string]engine.Tensor{"target_tokens": {DType: engine.Int64, Shape: []int{len(tgt)}, I64: tgt}}}}}
	for _, c := range []struct {
		dir string
		cfg engine.LoraConfig
	}{
		{"ckpt", engine.LoraConfig{Rank: 8, Alpha: 16, Seed: 1, TrainAttn: true, TrainMLP: true}},
		{"ckpt-lmhead", engine.LoraConfig{Rank: 8, Alpha: 16, Seed: 2, TrainAttn: true, TrainMLP: true, TrainUnembed: true}},
	} {
		a, err := m.NewAdapter(c.cfg)
		if err != nil {
			return err
		}
		for step := range 20 {
			res, err := m.ForwardBackward(context.Background(), a, req)
			if err != nil {
				return err
			}
			if _, err := m.OptimStep(context.Background(), a, engine.AdamParams{LearningRate: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "prep: %s step %d loss %.4f\n", c.dir, step, res.Metrics["loss:sum"])
		}
		if err := m.SaveAdapter(a, filepath.Join(work, c.dir), true); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(work, "model_dir"), []byte(modelDir), 0o644)
}

// reference is what the Python checks compare their consumer's answers with.
type reference struct {
	Probe    []int32   `json:"probe"`    // model input
	Targets  []int32   `json:"targets"`  // the next token of each input position
	Logprobs []float32 `json:"logprobs"` // log p(target | prefix) under our engine
	Prompt   []int32   `json:"prompt"`
	Greedy   []int32   `json:"greedy"` // our engine's argmax continuation of Prompt
}

func ref(modelDir, adapterDir, out string) error {
	m, err := engine.Load(modelDir, "ref")
	if err != nil {
		return err
	}
	var a *engine.Adapter
	if adapterDir != "" {
		a, err = m.LoadAdapter(adapterDir, false)
	} else {
		a, err = m.NewAdapter(engine.LoraConfig{Rank: 1, TrainAttn: true}) // B is zero: the base model
	}
	if err != nil {
		return err
	}
	probe, err := encode(m, probeText)
	if err != nil {
		return err
	}
	r := reference{Probe: probe[:len(probe)-1], Targets: probe[1:]}
	tgt := make([]int64, len(r.Targets))
	for i, t := range r.Targets {
		tgt[i] = int64(t)
	}
	res, err := m.ForwardBackward(context.Background(), a, engine.ForwardRequest{LossFn: "cross_entropy", Data: []engine.Datum{{Tokens: r.Probe,
		LossInputs: map[string]engine.Tensor{"target_tokens": {DType: engine.Int64, Shape: []int{len(tgt)}, I64: tgt}}}}})
	if err != nil {
		return err
	}
	r.Logprobs = res.Outputs[0]["logprobs"].F32
	if r.Prompt, err = encode(m, prompt); err != nil {
		return err
	}
	sr, err := m.Sample(context.Background(), &a.W, engine.SampleRequest{Prompt: r.Prompt, NumSamples: 1,
		Params: engine.SampleParams{MaxTokens: greedyLen, Temperature: 0, TopK: -1, TopP: 1, IgnoreEOS: true}})
	if err != nil {
		return err
	}
	r.Greedy = sr.Sequences[0].Tokens
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}
