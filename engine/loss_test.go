package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// gspoRequest builds a gspo request whose sampling logprobs sit at the model's own
// logprobs shifted by tau plus noise, so the sequence ratio S ≈ exp(tau − mean noise)
// lands below, inside or above the clip range as the case wants. lp0 are the model's
// logprobs per datum (float32 outputs of a forward pass).
func gspoRequest(rng *rand.Rand, base ForwardRequest, lp0 [][]float32, tau float64) ForwardRequest {
	req := ForwardRequest{LossFn: "gspo", Backward: true}
	for i, d := range base.Data {
		n := len(d.Tokens)
		old, adv, wts, mask := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for j := range old {
			old[j] = float32(float64(lp0[i][j]) - tau + 0.3*(2*rng.Float64()-1))
			adv[j] = float32(2*rng.Float64() - 1)
			wts[j] = float32(0.5 + 0.5*rng.Float64())
			if j >= n/3 { // a prompt-like prefix outside the ratio
				mask[j] = 1
			}
		}
		shape := []int{n}
		req.Data = append(req.Data, Datum{Tokens: d.Tokens, LossInputs: map[string]Tensor{
			"target_tokens":       d.LossInputs["target_tokens"],
			"logprobs":            {DType: Float32, Shape: shape, F32: old},
			"advantages":          {DType: Float32, Shape: shape, F32: adv},
			"weights":             {DType: Float32, Shape: shape, F32: wts},
			"sequence_ratio_mask": {DType: Float32, Shape: shape, F32: mask},
		}})
	}
	return req
}

// TestGSPOGradientMatchesFiniteDifferencesOfItsSurrogate checks GSPO-token's gradient in
// float64. Its per-token ratio carries the sequence ratio's value with a stop-gradient
// (tinker-docs /tinker/losses/gspo/), so the gradient is not that of the loss's value;
// it is that of the surrogate with S and the log-probabilities frozen at the current
// parameters θ0: F(θ) = −Σ_t w_t·min(S0·e^{lp_t(θ)−lp_t(θ0)}·A_t, clip(…)·A_t). That is
// PPO with sampling logprobs q'_t = lp_t(θ0) − log S0, whose value finite differences
// check. The three cases put S below, inside and above [0.8, 1.2], and the advantages
// have both signs, so every branch of the min and of the clip is exercised.
func TestGSPOGradientMatchesFiniteDifferencesOfItsSurrogate(t *testing.T) {
	for ci, tau := range []float64{-0.6, 0, 0.6} {
		t.Run(map[float64]string{-0.6: "S below clip", 0: "S inside", 0.6: "S above clip"}[tau], func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ci), 11))
			c := smallConfig([]string{"llama", "qwen2", "llama"}[ci], ci == 2)
			w := randWeights[float64](c, rng, ci != 1)
			lw := randomAdapter64(c, rng)
			rope := newRope(c, c.MaxPositions)
			ctx := context.Background()
			base := lossRequest("cross_entropy", c, rng, 1)
			fwd, err := forwardBackward(ctx, c, w, rope, lw, nil, base)
			if err != nil {
				t.Fatal(err)
			}
			lp0 := make([][]float32, len(base.Data))
			for i := range base.Data {
				lp0[i] = fwd.Outputs[i]["logprobs"].F32
			}
			req := gspoRequest(rng, base, lp0, tau)
			grad := zeroLoraLike(lw)
			res, err := forwardBackward(ctx, c, w, rope, lw, &grad, req)
			if err != nil {
				t.Fatal(err)
			}
			// The surrogate: PPO with q' = lp0 − log S0 and the same thresholds.
			sur := ForwardRequest{LossFn: "ppo", LossFnConfig: map[string]float64{"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}, Backward: true}
			clipped := 0
			for i, d := range req.Data {
				old, mask := d.LossInputs["logprobs"].F32, d.LossInputs["sequence_ratio_mask"].F32
				var sum float64
				var n int
				for j, m := range mask {
					if m != 0 {
						sum += float64(lp0[i][j]) - float64(old[j])
						n++
					}
				}
				logS := sum / float64(n)
				if s := math.Exp(logS); s < 0.8 || s > 1.2 {
					clipped++
				}
				q := make([]float32, len(old))
				for j := range q {
					q[j] = float32(float64(lp0[i][j]) - logS)
				}
				in := map[string]Tensor{}
				for k, v := range d.LossInputs {
					if k != "sequence_ratio_mask" {
						in[k] = v
					}
				}
				in["logprobs"] = Tensor{DType: Float32, Shape: []int{len(q)}, F32: q}
				sur.Data = append(sur.Data, Datum{Tokens: d.Tokens, LossInputs: in})
			}
			if (tau != 0) != (clipped == len(req.Data)) {
				t.Fatalf("case τ=%v clipped %d of %d sequence ratios", tau, clipped, len(req.Data))
			}
			surLoss := func() float64 {
				r, err := forwardBackward(ctx, c, w, rope, lw, nil, sur)
				if err != nil {
					t.Fatal(err)
				}
				return r.Metrics["loss:sum"]
			}
			// At θ0 the surrogate's value is the loss's.
			if got, want := res.Metrics["loss:sum"], surLoss(); math.Abs(got-want) > 1e-5*math.Max(1, math.Abs(want)) {
				t.Fatalf("gspo loss %.10g, surrogate %.10g", got, want)
			}
			ps, gs := lw.pairs(), grad.pairs()
			checked, nonzero := 0, 0
			for pi := range ps {
				for _, ab := range []struct{ v, g []float64 }{{ps[pi].A, gs[pi].A}, {ps[pi].B, gs[pi].B}} {
					for s := 0; s < 3; s++ {
						i := rng.IntN(len(ab.v))
						old := ab.v[i]
						const eps = 1e-6
						ab.v[i] = old + eps
						fp := surLoss()
						ab.v[i] = old - eps
						fm := surLoss()
						ab.v[i] = old
						fd := (fp - fm) / (2 * eps)
						if d := math.Abs(fd - ab.g[i]); d > 1e-5*math.Max(1, math.Abs(fd)) {
							t.Fatalf("pair %d index %d: gspo gradient %.10g, surrogate finite difference %.10g", pi, i, ab.g[i], fd)
						}
						checked++
						if ab.g[i] != 0 {
							nonzero++
						}
					}
				}
			}
			if checked < 80 || nonzero < checked/2 {
				t.Fatalf("%d gradients checked, %d non-zero", checked, nonzero)
			}
		})
	}
}

// TestGSPOSequenceRatioIsPerDatumMean checks the definition on a hand-made case: the
// ratio uses only the marked tokens, every weighted token gets the same ratio, and a
// token outside the mask still contributes its clipped term.
func TestGSPOSequenceRatioIsPerDatumMean(t *testing.T) {
	lp := []float64{-1, -2, -3, -4}
	old := []float32{-1.5, -2, -3.1, -9}
	mask := []float32{1, 1, 1, 0} // the last token's huge log-ratio must not count
	adv := []float32{1, -1, 0.5, 2}
	one := func(int) float64 { return 1 }
	cfg := map[string]float64{"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
	loss, grad := gspoLoss(cfg, lp, old, adv, mask, one)
	s := math.Exp((lp[0] - float64(old[0]) + lp[1] - float64(old[1]) + lp[2] - float64(old[2])) / 3) // ≈1.2214: above the clip
	want := 0.0
	for i, a := range adv {
		un, cl := s*float64(a), 1.2*float64(a)
		want -= math.Min(un, cl)
		// Above the clip: positive advantages take the clipped (flat) branch, negative
		// ones the unclipped one with gradient −S·A.
		g := 0.0
		if a < 0 {
			g = -s * float64(a)
		}
		if math.Abs(grad[i]-g) > 1e-12 {
			t.Fatalf("token %d: gradient %v, want %v", i, grad[i], g)
		}
	}
	if math.Abs(loss-want) > 1e-12 {
		t.Fatalf("loss %v, want %v", loss, want)
	}
}

func TestGSPOAndStableReinforceInputErrors(t *testing.T) {
	m := tinyModel(t)
	a, _ := m.NewAdapter(LoraConfig{Rank: 2, TrainAttn: true})
	mk := func(mask []float32, cfg map[string]float64) ForwardRequest {
		r := ceRequest([]int32{1, 2, 3, 4})
		r.LossFn, r.LossFnConfig = "gspo", cfg
		n := 3
		f := func(v float32) Tensor { return Tensor{DType: Float32, Shape: []int{n}, F32: []float32{v, v, v}} }
		r.Data[0].LossInputs["logprobs"], r.Data[0].LossInputs["advantages"] = f(-1), f(1)
		if mask != nil {
			r.Data[0].LossInputs["sequence_ratio_mask"] = Tensor{DType: Float32, Shape: []int{n}, F32: mask}
		}
		return r
	}
	if _, err := m.ForwardBackward(context.Background(), a, mk([]float32{0, 1, 1}, nil)); err != nil {
		t.Fatalf("a valid gspo request failed: %v", err)
	}
	cases := []struct {
		name string
		req  ForwardRequest
		want string
	}{
		{"mask missing", mk(nil, nil), `"sequence_ratio_mask"`},
		{"mask empty", mk([]float32{0, 0, 0}, nil), "sequence_ratio_mask marks no token"},
		{"mask shape", func() ForwardRequest {
			r := mk([]float32{1, 1, 1}, nil)
			r.Data[0].LossInputs["sequence_ratio_mask"] = Tensor{DType: Float32, Shape: []int{2}, F32: []float32{1, 1}}
			return r
		}(), "sequence_ratio_mask shape"},
		{"clip order", mk([]float32{1, 1, 1}, map[string]float64{"clip_low_threshold": 1.5}), "clip_low_threshold 1.5 is above"},
		{"unknown key", mk([]float32{1, 1, 1}, map[string]float64{"kl_coeff": 0.1}), `"kl_coeff" is not used by gspo`},
		{"stable_reinforce", func() ForwardRequest {
			r := mk([]float32{1, 1, 1}, map[string]float64{"kl_coeff": 0.1})
			r.LossFn = "stable_reinforce"
			return r
		}(), "does not publish the objective"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := append([]float32(nil), a.Grad.pairs()[0].B...)
			_, err := m.ForwardBackward(context.Background(), a, tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v does not mention %q", err, tc.want)
			}
			if _, ok := err.(*InputError); !ok {
				t.Fatalf("error %T is not an InputError", err)
			}
			if err := ValidateForward(m.Cfg, tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ValidateForward: %v does not mention %q", err, tc.want)
			}
			for i, v := range a.Grad.pairs()[0].B {
				if v != before[i] {
					t.Fatal("a rejected request changed the gradients")
				}
			}
		})
	}
}

// String-valued config (the SDK's loss_fn_config_v2 text values): a loss takes only the
// string keys it defines and only their values, a key is not both a number and a string,
// and the defaults fill what is not given. No TuFT loss defines a string key, so this
// registers one for the test.
func TestLossTextConfig(t *testing.T) {
	losses["test_text"] = lossSpec{required: []string{"target_tokens"}, config: map[string]float64{"beta": 0.5},
		text: map[string][]string{"mode": {"mean", "sum"}}}
	t.Cleanup(func() { delete(losses, "test_text") })
	for _, tc := range []struct {
		num  map[string]float64
		text map[string]string
		want string // error substring, "" for success
		mode string
	}{
		{nil, nil, "", "mean"},
		{nil, map[string]string{"mode": "sum"}, "", "sum"},
		{map[string]float64{"beta": 1}, map[string]string{"mode": "sum"}, "", "sum"},
		{nil, map[string]string{"mode": "max"}, `"max" is not one of mean, sum`, ""},
		{nil, map[string]string{"other": "x"}, `key "other"`, ""},
		{nil, map[string]string{"beta": "x"}, `["beta"] must be a number`, ""},
		{map[string]float64{"mode": 1}, nil, `["mode"] of test_text takes a string`, ""},
	} {
		spec, _, err := resolveLoss("test_text", tc.num)
		var got map[string]string
		if err == nil {
			got, err = resolveTextConfig("test_text", spec, tc.num, tc.text)
		}
		switch {
		case tc.want == "" && (err != nil || got["mode"] != tc.mode):
			t.Errorf("%v %v: %v %v, want mode %s", tc.num, tc.text, got, err, tc.mode)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v %v: %v, want an error naming %s", tc.num, tc.text, err, tc.want)
		}
	}
	// The implemented losses define no string key: every string value is refused, by key.
	err := ValidateForward(Config{}, ForwardRequest{LossFn: "ppo", LossFnTextConfig: map[string]string{"clip_low_threshold": "0.1"}})
	if err == nil || !strings.Contains(err.Error(), "must be a number") {
		t.Fatalf("ppo with a string clip: %v", err)
	}
}
