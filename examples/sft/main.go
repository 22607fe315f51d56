// Command sft is supervised fine-tuning with the Go client: it teaches the built-in tiny
// model a few facts with a LoRA adapter, printing the loss as it falls and a greedy
// completion before and after.
//
//	tuft launch &                       # embedded defaults
//	go run ./examples/sft
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/client"
	"github.com/tuft-go/tuft/engine/tokenizer"
	"github.com/tuft-go/tuft/examples/internal/exenv"
)

var facts = []struct{ prompt, answer string }{
	{"Q: What is the capital of France?\nA:", " Paris."},
	{"Q: What colour is the sky?\nA:", " Blue."},
	{"Q: How many legs does a cat have?\nA:", " Four."},
}

func main() {
	steps := flag.Int("steps", 40, "training steps")
	model := flag.String("model", "tuft/tiny", "base model")
	flag.Parse()
	url, key, err := exenv.Server()
	if err == nil {
		err = run(context.Background(), url, key, *model, *steps, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sft:", err)
		os.Exit(1)
	}
}

// datum builds a training example whose loss covers only the answer tokens.
func datum(tok *tokenizer.Tokenizer, prompt, answer string) (wire.Datum, error) {
	p, err := tok.Encode(prompt)
	if err != nil {
		return wire.Datum{}, err
	}
	a, err := tok.Encode(answer)
	if err != nil {
		return wire.Datum{}, err
	}
	all := append(append([]int32(nil), p...), a...)
	n := len(all) - 1
	tgt := make([]int64, n)
	w := make([]float32, n)
	for i := 0; i < n; i++ {
		tgt[i] = int64(all[i+1])
		if i+1 >= len(p) {
			w[i] = 1
		}
	}
	return wire.Datum{Tokens: all[:n], LossInputs: map[string]wire.Tensor{
		"target_tokens": {DType: wire.Int64, Shape: []int{n}, I64: tgt},
		"weights":       {DType: wire.Float32, Shape: []int{n}, F32: w}}}, nil
}

func complete(ctx context.Context, sc *client.SamplingClient, tok *tokenizer.Tokenizer, prompt string) (string, error) {
	p, err := tok.Encode(prompt)
	if err != nil {
		return "", err
	}
	f, err := sc.Sample(ctx, p, 1, client.SamplingParams{MaxTokens: 8, Temperature: 0, Stop: []string{"\n"}})
	if err != nil {
		return "", err
	}
	r, err := f.Result(ctx)
	if err != nil {
		return "", err
	}
	return tok.Decode(r.Sequences[0].Tokens), nil
}

func run(ctx context.Context, url, key, model string, steps int, out io.Writer) error {
	tok, err := exenv.TinyTokenizer()
	if err != nil {
		return err
	}
	sc, err := client.NewServiceClient(ctx, url, key)
	if err != nil {
		return err
	}
	defer sc.Close()
	tc, err := sc.CreateLoRATrainingClient(ctx, model, client.DefaultLora(16))
	if err != nil {
		return err
	}
	var data []wire.Datum
	for _, f := range facts {
		d, err := datum(tok, f.prompt, f.answer)
		if err != nil {
			return err
		}
		data = append(data, d)
	}
	before, err := tc.SaveWeightsAndGetSamplingClient(ctx)
	if err != nil {
		return err
	}
	for _, f := range facts {
		c, err := complete(ctx, before, tok, f.prompt)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "before: %q → %q\n", f.prompt, c)
	}
	adam := wire.AdamParams{LearningRate: 4e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
	var first, last float64
	for step := 1; step <= steps; step++ {
		fb, err := tc.ForwardBackward(ctx, data, "cross_entropy", nil)
		if err != nil {
			return err
		}
		op, err := tc.OptimStep(ctx, adam) // pipelined: submitted before the loss is read
		if err != nil {
			return err
		}
		r, err := fb.Result(ctx)
		if err != nil {
			return err
		}
		if _, err := op.Result(ctx); err != nil {
			return err
		}
		last = r.Metrics["loss:sum"]
		if step == 1 {
			first = last
		}
		if step == 1 || step%5 == 0 || step == steps {
			fmt.Fprintf(out, "step %3d  loss %.4f\n", step, last)
		}
	}
	after, err := tc.SaveWeightsAndGetSamplingClient(ctx)
	if err != nil {
		return err
	}
	for _, f := range facts {
		c, err := complete(ctx, after, tok, f.prompt)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "after:  %q → %q\n", f.prompt, c)
	}
	fmt.Fprintf(out, "loss %.4f → %.4f\n", first, last)
	if !(last < first) {
		return fmt.Errorf("the loss did not go down (%.4f → %.4f)", first, last)
	}
	return nil
}
