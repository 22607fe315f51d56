package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"testing"
)

func runBenchJSON(t *testing.T, args ...string) benchReport {
	t.Helper()
	benchPresetInChild = false // the test binary is not tuft: write the preset in-process
	var out bytes.Buffer
	if err := runBench(append([]string{"engine", "--preset", "tiny", "--tokens", "32", "--steps", "2", "--sample-tokens", "4", "--json"}, args...), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var r benchReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	return r
}

func checkBenchSide(t *testing.T, name string, s *benchSide, sampleTokens int) {
	t.Helper()
	if s.Train.TokensPerS <= 0 || s.Train.MedianS <= 0 || len(s.Train.StepS) != 2 || s.PeakRSSMiB <= 0 {
		t.Fatalf("%s: bad figures %+v", name, s)
	}
	for _, b := range []int{1, 16} {
		x := s.sample(b)
		if x == nil || x.TokensPerS <= 0 || x.OutputTokens != b*sampleTokens {
			t.Fatalf("%s: sample batch %d: %+v", name, b, x)
		}
	}
}

func TestBenchEngineGoOnly(t *testing.T) {
	r := runBenchJSON(t, "--torch", "off")
	checkBenchSide(t, "go", &r.Go, 4)
	if r.Torch != nil || r.TorchSkipped == "" || r.Tokens != 32 || r.Rank != 16 || r.Layers != 4 {
		t.Fatalf("report: %+v", r)
	}
}

func TestBenchEngineWithTorch(t *testing.T) {
	if _, _, why := findTorchRef("", "", false); why != "" {
		t.Skip("PyTorch reference unavailable: " + why)
	}
	r := runBenchJSON(t, "--torch", "on")
	checkBenchSide(t, "go", &r.Go, 4)
	if r.Torch == nil {
		t.Fatalf("no PyTorch figures: %s", r.TorchSkipped)
	}
	checkBenchSide(t, "torch", r.Torch, 4)
	if r.Ratios["train_tokens_per_s"] <= 0 || r.Ratios["peak_rss_mib"] <= 0 {
		t.Fatalf("ratios: %v", r.Ratios)
	}
	// Same model, same tokens, B = 0 at the warm-up step: the losses must agree.
	if g, p := r.Go.Train.FirstLoss, r.Torch.Train.FirstLoss; math.Abs(g-p) > 1e-4*math.Abs(p) {
		t.Fatalf("warm-up loss/token: Go %v, PyTorch %v", g, p)
	}
}
