package service

import (
	"fmt"
	"math"

	"github.com/tuft-go/tuft/engine"
)

// Output budgets (finding 8 of issue 22): one n=128, top_logprobs=20 completion answered
// 50 MB and raised the server's memory by 880 MB, for a request whose every parameter
// was within its own limit. Each sampling request's output is therefore sized from its
// parameters before any work is queued, on every sampling route (Tinker asample with
// its 0.38 outputs, OpenAI completions and chat, Anthropic messages), and refused (400
// naming the limit) over limits.max_sample_output_cells or limits.max_sample_output_bytes.

// OutputSize is what a sampling request asks the server to produce.
type OutputSize struct {
	// Cells counts the values of the reply: a sampled token with its logprob, an
	// alternative token with its logprob, a prompt position's logprob or target.
	Cells int64
	// Bytes estimates the encoded reply from the cells (see the per-cell sizes).
	Bytes int64
}

// Bytes per output cell, as estimated: generous for what a cell usually takes, so the
// estimate bounds the reply (and the memory building it) rather than guessing it.
const (
	// TinkerCellBytes: a token id and a logprob in a Tinker sample result (JSON numbers
	// with separators; the protobuf reply is smaller).
	TinkerCellBytes = 24
	// TextCellBytes: a generated token's text in an OpenAI or Anthropic reply, escaped.
	TextCellBytes = 16
	// LogprobCellBytes: an OpenAI logprob entry (the token's text, its logprob and its
	// bytes array).
	LogprobCellBytes = 96
)

// SampleOutputSize is the output of a Tinker sample request: its samples' tokens and
// their topk_sample_logprobs alternatives, and the prompt outputs it asks for (prompt
// logprobs and their top-k, prompt_alt_tokens_k draws, target_prompt_logprobs cells).
func SampleOutputSize(req engine.SampleRequest) OutputSize {
	mt := req.Params.MaxTokens
	if mt == 0 {
		mt = 16 // the default submitSample applies
	}
	p := int64(len(req.Prompt))
	cells := mulSat(nonNeg(req.NumSamples), nonNeg(mt), 1+nonNeg(req.TopKSampleLogprobs))
	if req.PromptLogprobs {
		cells = addSat(cells, p)
	}
	cells = addSat(cells, mulSat(p, nonNeg(req.TopKPromptLogprobs)))
	cells = addSat(cells, mulSat(max(p-1, 0), nonNeg(req.PromptAltTokensK)))
	if t := req.PromptTargets; t != nil {
		cells = addSat(cells, int64(len(t.IDs)))
	}
	return OutputSize{Cells: cells, Bytes: mulSat(cells, TinkerCellBytes)}
}

// TextOutputSize is the output of an OpenAI or Anthropic generation: n choices of each
// prompt, max_tokens tokens each with topLogprobs alternatives, and the prompts'
// logprobs (with promptTop alternatives) when echoed.
func TextOutputSize(promptTokens []int, n, maxTokens, topLogprobs int, promptLogprobs bool, promptTop int) OutputSize {
	var cells, total int64
	for _, p := range promptTokens {
		total = addSat(total, int64(p))
	}
	per := mulSat(nonNeg(n), nonNeg(maxTokens))
	cells = mulSat(per, int64(len(promptTokens)), 1+nonNeg(topLogprobs))
	if promptLogprobs {
		cells = addSat(cells, mulSat(total, 1+nonNeg(promptTop)))
	}
	perCell := int64(TextCellBytes)
	if topLogprobs > 0 || promptLogprobs {
		perCell = LogprobCellBytes
	}
	return OutputSize{Cells: cells, Bytes: mulSat(cells, perCell)}
}

// CheckOutput refuses an output over limits.max_sample_output_cells or
// limits.max_sample_output_bytes: a 400 naming the limit and what made the output big.
func (s *Service) CheckOutput(o OutputSize, what string) error {
	lim := s.cfg.Limits
	switch {
	case o.Cells > lim.MaxSampleOutputCells:
		return invalidf("%s asks for %d output values, more than limits.max_sample_output_cells %d: ask for fewer samples, tokens or logprobs per request",
			what, o.Cells, lim.MaxSampleOutputCells)
	case o.Bytes > lim.MaxSampleOutputBytes:
		return invalidf("%s asks for an output of about %d bytes, more than limits.max_sample_output_bytes %d: ask for fewer samples, tokens or logprobs per request",
			what, o.Bytes, lim.MaxSampleOutputBytes)
	}
	return nil
}

func nonNeg(n int) int64 { return int64(max(n, 0)) }

// mulSat multiplies non-negative factors, saturating at MaxInt64 (a request's
// parameters are checked against their own limits only later).
func mulSat(fs ...int64) int64 {
	out := int64(1)
	for _, f := range fs {
		if f == 0 {
			return 0
		}
		if out > math.MaxInt64/f {
			out = math.MaxInt64
			continue
		}
		out *= f
	}
	return out
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// sampleWhat names a Tinker sample request in an output-budget refusal.
func sampleWhat(req engine.SampleRequest) string {
	return fmt.Sprintf("num_samples %d × max_tokens %d × (1 + topk_sample_logprobs %d) plus the prompt outputs",
		req.NumSamples, req.Params.MaxTokens, req.TopKSampleLogprobs)
}
