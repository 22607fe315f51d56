package service_test

import (
	"math"
	"testing"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/service"
)

// The output sizes count what each route's reply holds, and saturate instead of
// wrapping for parameters not yet checked against their own limits.
func TestOutputSizes(t *testing.T) {
	req := engine.SampleRequest{Prompt: make([]int32, 11), NumSamples: 128, Params: engine.SampleParams{MaxTokens: 512},
		TopKSampleLogprobs: 20, PromptLogprobs: true, TopKPromptLogprobs: 3, PromptAltTokensK: 2}
	got := service.SampleOutputSize(req)
	want := int64(128*512*21 + 11 + 11*3 + 10*2)
	if got.Cells != want || got.Bytes != want*service.TinkerCellBytes {
		t.Errorf("Tinker sample: %+v, want %d cells", got, want)
	}
	if got := service.SampleOutputSize(engine.SampleRequest{NumSamples: 2}); got.Cells != 32 {
		t.Errorf("default max_tokens (16): %+v", got)
	}
	if got := service.SampleOutputSize(engine.SampleRequest{NumSamples: math.MaxInt, Params: engine.SampleParams{MaxTokens: math.MaxInt}, TopKSampleLogprobs: math.MaxInt}); got.Cells != math.MaxInt64 || got.Bytes != math.MaxInt64 {
		t.Errorf("huge parameters: %+v, want saturation", got)
	}
	if got := service.SampleOutputSize(engine.SampleRequest{NumSamples: -5, Params: engine.SampleParams{MaxTokens: 10}}); got.Cells != 0 {
		t.Errorf("negative num_samples: %+v", got)
	}
	text := service.TextOutputSize([]int{4, 6}, 3, 100, 0, false, 0)
	if text.Cells != 2*3*100 || text.Bytes != 600*service.TextCellBytes {
		t.Errorf("text: %+v", text)
	}
	lp := service.TextOutputSize([]int{4}, 2, 10, 5, true, 5)
	if lp.Cells != 2*10*6+4*6 || lp.Bytes != lp.Cells*service.LogprobCellBytes {
		t.Errorf("with logprobs: %+v", lp)
	}
}
