// Command rl is a reinforcement-learning loop with the Go client (GRPO-style, with the
// importance_sampling loss): the policy samples groups of completions, a reward scores
// them, advantages are centred per group, and the adapter moves toward the better
// completions. The reward here is simple and visible: the fraction of sampled tokens
// that are lower-case words, so the mean reward climbs as training goes on.
//
//	tuft launch &
//	go run ./examples/rl
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/client"
	"github.com/tuft-go/tuft/engine/tokenizer"
	"github.com/tuft-go/tuft/examples/internal/exenv"
)

func main() {
	iters := flag.Int("iterations", 12, "RL iterations")
	model := flag.String("model", "tuft/tiny", "base model")
	flag.Parse()
	url, key, err := exenv.Server()
	if err == nil {
		_, err = run(context.Background(), url, key, *model, *iters, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rl:", err)
		os.Exit(1)
	}
}

// reward is the fraction of sampled tokens that are plain lower-case letters or
// spaces: "write words, not noise".
func reward(tok *tokenizer.Tokenizer, toks []int32) float64 {
	if len(toks) == 0 {
		return 0
	}
	n := 0
	for _, t := range toks {
		s := tok.Decode([]int32{t})
		if s != "" && strings.Trim(s, " abcdefghijklmnopqrstuvwxyz") == "" {
			n++
		}
	}
	return float64(n) / float64(len(toks))
}

// run returns the mean reward of the first and the last iteration.
func run(ctx context.Context, url, key, model string, iters int, out io.Writer) ([2]float64, error) {
	var first, last float64
	tok, err := exenv.TinyTokenizer()
	if err != nil {
		return [2]float64{}, err
	}
	sc, err := client.NewServiceClient(ctx, url, key)
	if err != nil {
		return [2]float64{}, err
	}
	defer sc.Close()
	tc, err := sc.CreateLoRATrainingClient(ctx, model, client.DefaultLora(16))
	if err != nil {
		return [2]float64{}, err
	}
	prompts := []string{"Say something:", "Write a word:", "Sing:", "Tell me:"}
	const group = 8
	for it := 1; it <= iters; it++ {
		policy, err := tc.SaveWeightsAndGetSamplingClient(ctx)
		if err != nil {
			return [2]float64{}, err
		}
		var data []wire.Datum
		var sum float64
		var count int
		var example string
		for _, p := range prompts {
			pt, err := tok.Encode(p)
			if err != nil {
				return [2]float64{}, err
			}
			f, err := policy.Sample(ctx, pt, group, client.DefaultSampling(8))
			if err != nil {
				return [2]float64{}, err
			}
			res, err := f.Result(ctx)
			if err != nil {
				return [2]float64{}, err
			}
			rs := make([]float64, len(res.Sequences))
			var mean float64
			for i, s := range res.Sequences {
				rs[i] = reward(tok, s.Tokens)
				mean += rs[i] / float64(len(rs))
			}
			sum += mean * float64(len(rs))
			count += len(rs)
			if example == "" {
				example = tok.Decode(res.Sequences[0].Tokens)
			}
			for i, s := range res.Sequences {
				if adv := rs[i] - mean; adv != 0 {
					data = append(data, rlDatum(pt, s, adv))
				}
			}
		}
		avg := sum / float64(count)
		if it == 1 {
			first = avg
		}
		last = avg
		fmt.Fprintf(out, "iteration %2d  mean reward %.3f  sample %q\n", it, avg, example)
		if len(data) == 0 {
			continue
		}
		fb, err := tc.ForwardBackward(ctx, data, "importance_sampling", nil)
		if err != nil {
			return [2]float64{}, err
		}
		op, err := tc.OptimStep(ctx, wire.AdamParams{LearningRate: 2e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
		if err != nil {
			return [2]float64{}, err
		}
		if _, err := fb.Result(ctx); err != nil {
			return [2]float64{}, err
		}
		if _, err := op.Result(ctx); err != nil {
			return [2]float64{}, err
		}
	}
	fmt.Fprintf(out, "mean reward %.3f → %.3f\n", first, last)
	return [2]float64{first, last}, nil
}

// rlDatum is the cookbook's layout: the prompt positions carry no signal; every sampled
// token gets the sequence's advantage and its sampling logprob.
func rlDatum(prompt []int32, s wire.Sequence, adv float64) wire.Datum {
	ob := len(prompt) - 1
	in := append(append([]int32(nil), prompt...), s.Tokens[:len(s.Tokens)-1]...)
	n := len(in)
	tgt := make([]int64, n)
	lp := make([]float32, n)
	a := make([]float32, n)
	for i := range tgt {
		if i >= ob {
			tgt[i] = int64(s.Tokens[i-ob])
			lp[i] = s.Logprobs[i-ob]
			a[i] = float32(adv)
		}
	}
	return wire.Datum{Tokens: in, LossInputs: map[string]wire.Tensor{
		"target_tokens": {DType: wire.Int64, Shape: []int{n}, I64: tgt},
		"logprobs":      {DType: wire.Float32, Shape: []int{n}, F32: lp},
		"advantages":    {DType: wire.Float32, Shape: []int{n}, F32: a}}}
}
