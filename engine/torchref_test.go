package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/tuft-go/tuft/engine/safetensors"
)

// TestMatchesPyTorchReference compares the engine on the tiny preset with the fixtures
// that tools/torchref/reference.py computed in float64 with PyTorch: base logprobs, each
// loss's value (the five original losses and gspo), per-token logprobs and every LoRA gradient, and one AdamW step (with
// global-norm clipping and weight decay) against torch.optim.AdamW, and two Dimuon steps
// against reference.py's own float64 reading of Dimuon.
func TestMatchesPyTorchReference(t *testing.T) {
	checkTorchRef(t, tinyModel(t), cpuTorchTol)
}

// torchTol bounds the relative errors (‖got − want‖ / ‖want‖) against the PyTorch
// fixtures. dimuon bounds the error of the Dimuon update W − W0 relative to the update
// (and of the momentum relative to itself).
type torchTol struct {
	logprobs, loss, grad, adamw, dimuon float64
}

// cpuTorchTol is what the CPU reaches in float32.
var cpuTorchTol = torchTol{logprobs: 1e-5, loss: 1e-4, grad: 1e-3, adamw: 1e-5, dimuon: 1e-4}

func checkTorchRef(t *testing.T, m *Model, tol torchTol) {
	dir := filepath.Join("testdata", "torchref")
	var in struct {
		Datums []struct {
			Tokens       []int32   `json:"tokens"`
			TargetTokens []int64   `json:"target_tokens"`
			Weights      []float32 `json:"weights"`
			Logprobs     []float32 `json:"logprobs"`
			Advantages   []float32 `json:"advantages"`
			RatioMask    []float32 `json:"sequence_ratio_mask"`
		} `json:"datums"`
		Losses map[string]map[string]float64 `json:"losses"`
		AdamW  struct {
			LearningRate float64 `json:"learning_rate"`
			Beta1        float64 `json:"beta1"`
			Beta2        float64 `json:"beta2"`
			Eps          float64 `json:"eps"`
			WeightDecay  float64 `json:"weight_decay"`
			GradClipNorm float64 `json:"grad_clip_norm"`
		} `json:"adamw"`
		Dimuon struct {
			LearningRate float64 `json:"learning_rate"`
			Beta1        float64 `json:"beta1"`
			GradClipNorm float64 `json:"grad_clip_norm"`
			Damping      float64 `json:"damping"`
			RankExponent float64 `json:"rank_lr_correction_exponent"`
			Steps        int     `json:"steps"`
		} `json:"dimuon"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "inputs.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatal(err)
	}
	var values map[string]float64
	b, _ = os.ReadFile(filepath.Join(dir, "expected.json"))
	if err := json.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	exp, err := safetensors.ReadFile(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	want := func(name string) []float32 {
		tt, ok := exp.Get(name)
		if !ok {
			t.Fatalf("fixture has no %s", name)
		}
		v, _ := tt.Float32()
		return v
	}
	// relErr is ‖got − want‖ / ‖want‖.
	// worst records the largest error seen per kind, logged at the end so a run on new
	// hardware shows how close it came to each bound.
	worst := map[string]float64{}
	defer func() { t.Logf("largest relative errors: %v (bounds %+v)", worst, tol) }()
	relErr := func(got, want []float32) float64 {
		var d, n float64
		for i := range want {
			d += (float64(got[i]) - float64(want[i])) * (float64(got[i]) - float64(want[i]))
			n += float64(want[i]) * float64(want[i])
		}
		return math.Sqrt(d / math.Max(n, 1e-30))
	}
	// perLoss records each loss's own largest gradient error too, for reports.
	perLoss := map[string]float64{}
	defer func() { t.Logf("largest relative gradient error per loss: %v", perLoss) }()
	note := func(kind string, e float64) float64 {
		worst[kind] = math.Max(worst[kind], e)
		return e
	}
	req := func(loss string, backward bool) ForwardRequest {
		r := ForwardRequest{LossFn: loss, LossFnConfig: in.Losses[loss], Backward: backward}
		for _, d := range in.Datums {
			n := len(d.Tokens)
			li := map[string]Tensor{"target_tokens": {DType: Int64, Shape: []int{n}, I64: d.TargetTokens}}
			if loss == "cross_entropy" {
				li["weights"] = Tensor{DType: Float32, Shape: []int{n}, F32: d.Weights}
			} else {
				li["logprobs"] = Tensor{DType: Float32, Shape: []int{n}, F32: d.Logprobs}
				li["advantages"] = Tensor{DType: Float32, Shape: []int{n}, F32: d.Advantages}
			}
			if loss == "gspo" {
				li["weights"] = Tensor{DType: Float32, Shape: []int{n}, F32: d.Weights}
				li["sequence_ratio_mask"] = Tensor{DType: Float32, Shape: []int{n}, F32: d.RatioMask}
			}
			r.Data = append(r.Data, Datum{Tokens: d.Tokens, LossInputs: li})
		}
		return r
	}
	base, err := m.ForwardBackward(context.Background(), nil, req("cross_entropy", false))
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr(base.Outputs[0]["logprobs"].F32, want("base/logprobs/0")); note("logprobs", e) > tol.logprobs {
		t.Fatalf("base logprobs differ from PyTorch: relative error %.2e", e)
	}
	t.Run("dimuon", func(t *testing.T) {
		// Two Dimuon steps of cross-entropy from the fixture's adapter, against
		// reference.py's float64 step (an SVD for the matrix sign).
		a, err := m.LoadAdapterAs(filepath.Join(dir, "adapter"), false, OptimizerConfig{Type: OptimizerDimuon, Version: 1})
		if err != nil {
			t.Fatal(err)
		}
		w0 := map[string][]float32{}
		for _, tt := range loraTensors(&a.W, "") {
			w0[tt.Name], _ = tt.Float32()
		}
		dp := in.Dimuon
		p := DimuonParams{LearningRate: dp.LearningRate, Beta1: dp.Beta1, GradClipNorm: dp.GradClipNorm, Damping: dp.Damping,
			RankLRCorrectionExponent: dp.RankExponent}
		for range dp.Steps {
			if _, err := m.ForwardBackward(context.Background(), a, req("cross_entropy", true)); err != nil {
				t.Fatal(err)
			}
			if _, err := m.DimuonStep(context.Background(), a, p); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.AdapterToHost(a); err != nil {
			t.Fatal(err)
		}
		for _, tt := range loraTensors(&a.W, "") {
			w, _ := tt.Float32()
			ref := want("dimuon/" + tt.Name)
			got, exp := make([]float32, len(w)), make([]float32, len(w))
			for i := range w {
				got[i], exp[i] = w[i]-w0[tt.Name][i], ref[i]-w0[tt.Name][i]
			}
			if e := relErr(got, exp); note("dimuon", e) > tol.dimuon {
				t.Fatalf("Dimuon update of %s: relative error %.2e", tt.Name, e)
			}
		}
		for _, tt := range loraTensors(&a.M, "") {
			mm, _ := tt.Float32()
			if e := relErr(mm, want("dimuon_momentum/"+tt.Name)); note("dimuon momentum", e) > tol.dimuon {
				t.Fatalf("Dimuon momentum of %s: relative error %.2e", tt.Name, e)
			}
		}
	})
	for loss := range in.Losses {
		t.Run(loss, func(t *testing.T) {
			a, err := m.LoadAdapter(filepath.Join(dir, "adapter"), false)
			if err != nil {
				t.Fatal(err)
			}
			res, err := m.ForwardBackward(context.Background(), a, req(loss, true))
			if err != nil {
				t.Fatal(err)
			}
			if got, w := res.Metrics["loss:sum"], values[loss]; note("loss", math.Abs(got-w)/math.Max(1, math.Abs(w))) > tol.loss {
				t.Fatalf("loss %v, PyTorch %v", got, w)
			}
			for i := range in.Datums {
				if e := relErr(res.Outputs[i]["logprobs"].F32, want(fmt.Sprintf("%s/logprobs/%d", loss, i))); note("logprobs", e) > tol.logprobs {
					t.Fatalf("datum %d logprobs: relative error %.2e", i, e)
				}
			}
			if err := m.AdapterToHost(a); err != nil {
				t.Fatal(err)
			}
			for _, tt := range loraTensors(&a.Grad, "") {
				g, _ := tt.Float32()
				e := relErr(g, want(loss+"/grad/"+tt.Name))
				perLoss[loss] = math.Max(perLoss[loss], e)
				if note("grad", e) > tol.grad {
					t.Fatalf("gradient of %s: relative error %.2e", tt.Name, e)
				}
			}
			if loss != "cross_entropy" {
				return
			}
			p := in.AdamW
			if _, err := m.OptimStep(context.Background(), a, AdamParams{LearningRate: p.LearningRate, Beta1: p.Beta1, Beta2: p.Beta2,
				Eps: p.Eps, WeightDecay: p.WeightDecay, GradClipNorm: p.GradClipNorm}); err != nil {
				t.Fatal(err)
			}
			if err := m.AdapterToHost(a); err != nil {
				t.Fatal(err)
			}
			for _, tt := range loraTensors(&a.W, "") {
				w, _ := tt.Float32()
				if e := relErr(w, want("adamw/"+tt.Name)); note("adamw", e) > tol.adamw {
					t.Fatalf("weights of %s after AdamW: relative error %.2e", tt.Name, e)
				}
			}
		})
	}
}
