package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/engine/device"
)

// TestMatrixSignIsThePolarFactor checks the Newton–Schulz matrix sign against the polar
// factor computed by eigendecomposition, for wide and tall matrices whose condition
// numbers reach 1e5, and that its singular values are 1 (O·Oᵀ = I on the short side),
// within 1e-9 + 1e-16·cond².
func TestMatrixSignIsThePolarFactor(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	for _, tc := range []struct {
		rows, cols int
		cond       float64
	}{{4, 64, 10}, {64, 4, 1e3}, {8, 24, 1e5}, {16, 16, 100}, {1, 40, 1}, {3, 3, 1e4}} {
		k := min(tc.rows, tc.cols)
		sv := make([]float64, k)
		for i := range sv {
			sv[i] = 7 * math.Pow(tc.cond, -float64(i)/math.Max(1, float64(k-1)))
		}
		p := randWithSpectrum(rng, tc.rows, tc.cols, sv)
		o := matrixSign(p, tc.rows, tc.cols)
		want := polarRef(p, tc.rows, tc.cols)
		var d, n float64
		for i := range o {
			d += (o[i] - want[i]) * (o[i] - want[i])
			n += want[i] * want[i]
		}
		// Both routes work through a Gram matrix, whose condition number is cond²: float64
		// resolves its smallest eigenvalue to about 1e-16·cond² relative.
		tol := 1e-9 + 1e-16*tc.cond*tc.cond
		if e := math.Sqrt(d / n); e > tol {
			t.Errorf("%d×%d cond %g: relative distance to the polar factor %.2e", tc.rows, tc.cols, tc.cond, e)
		}
		// Singular values: the short side's Gram matrix is the identity.
		if tc.rows > tc.cols {
			o = transposeRef(o, tc.rows, tc.cols)
		}
		cols := max(tc.rows, tc.cols)
		for i := range k {
			for j := range k {
				var g float64
				for c := range cols {
					g += o[i*cols+c] * o[j*cols+c]
				}
				want := 0.0
				if i == j {
					want = 1
				}
				if math.Abs(g-want) > tol {
					t.Fatalf("%d×%d: (O·Oᵀ)[%d,%d] = %.12f", tc.rows, tc.cols, i, j, g)
				}
			}
		}
	}
}

// TestDimuonStepMatchesReference runs Dimuon steps on the tiny model (real gradients of a
// cross-entropy loss, clipping active on one step) and compares every LoRA matrix with
// dimuonRef, and checks the invariants: the update's Frobenius norm is η·√rank, gradients
// are zeroed, a matrix with zero momentum does not move.
func TestDimuonStepMatchesReference(t *testing.T) {
	m := tinyModel(t)
	ctx := context.Background()
	const rank = 4
	a, err := m.NewAdapter(LoraConfig{Rank: rank, Alpha: 8, Seed: 7, TrainAttn: true, TrainMLP: true, TrainUnembed: true,
		Optimizer: OptimizerConfig{Type: OptimizerDimuon, Version: 1}})
	if err != nil {
		t.Fatal(err)
	}
	req := ceRequest([]int32{5, 9, 14, 3, 27, 8, 11, 30, 2, 19})
	params := []DimuonParams{
		{LearningRate: 0.01, Beta1: 0.9, Damping: 0.1, RankLRCorrectionExponent: 0.5},
		{LearningRate: 0.02, Beta1: 0.8, Damping: 0.5, RankLRCorrectionExponent: 0, GradClipNorm: 0.05},
		NewDimuonParams(0.005),
	}
	for step, p := range params {
		if _, err := m.ForwardBackward(ctx, a, req); err != nil {
			t.Fatal(err)
		}
		before := dimuonMatrices(a)
		type snap struct{ w, g, m []float64 }
		snaps := make([]snap, len(before))
		var ss float64
		for i, x := range before {
			snaps[i] = snap{f64(x.w), f64(x.g), f64(x.m)}
			for _, v := range x.g {
				ss += float64(v) * float64(v)
			}
		}
		clip := 1.0
		if p.GradClipNorm > 0 {
			clip = math.Min(1, p.GradClipNorm/(math.Sqrt(ss)+1e-6))
		}
		if step == 1 && clip == 1 {
			t.Fatal("the clipping step does not clip")
		}
		met, err := m.DimuonStep(ctx, a, p)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(met["grad_norm:max"]-math.Sqrt(ss)) > 1e-9*math.Sqrt(ss) || met["learning_rate:max"] != p.LearningRate {
			t.Fatalf("metrics %v", met)
		}
		eta := p.LearningRate * math.Pow(32.0/rank, p.RankLRCorrectionExponent)
		moved, still := 0, 0
		for i, x := range dimuonMatrices(a) {
			s := snaps[i]
			ww, wm := dimuonRef(s.w, s.g, s.m, x.rows, x.cols, rank, clip, p.Beta1, p.Damping, p.LearningRate, p.RankLRCorrectionExponent)
			var dn, un, mn float64
			for j := range x.w {
				if x.g[j] != 0 {
					t.Fatalf("step %d matrix %d: gradient not zeroed", step, i)
				}
				if float64(x.m[j]) != wm[j] {
					t.Fatalf("step %d matrix %d: momentum %v, reference %v", step, i, x.m[j], wm[j])
				}
				d := float64(x.w[j]) - ww[j]
				dn += d * d
				u := float64(x.w[j]) - s.w[j]
				un += u * u
				mn += wm[j] * wm[j]
			}
			if mn == 0 {
				if un != 0 {
					t.Fatalf("step %d matrix %d: zero momentum, but the weights moved", step, i)
				}
				still++
				continue
			}
			moved++
			// The update is η·√rank in Frobenius norm; float32 storage of the weights
			// bounds how exactly that can be seen.
			if e := math.Abs(math.Sqrt(un)-eta*math.Sqrt(rank)) / (eta * math.Sqrt(rank)); e > 1e-4 {
				t.Fatalf("step %d matrix %d (%d×%d): update norm %.6g, want η√r = %.6g", step, i, x.rows, x.cols, math.Sqrt(un), eta*math.Sqrt(rank))
			}
			// Agreement with the reference, relative to the update (float32 rounding).
			if e := math.Sqrt(dn / un); e > 1e-4 {
				t.Fatalf("step %d matrix %d (%d×%d): weights differ from the reference by %.2e of the update", step, i, x.rows, x.cols, e)
			}
		}
		// At step 0, B = 0 makes every A's gradient (and momentum) zero: A stays.
		if step == 0 && (still == 0 || moved == 0) {
			t.Fatalf("step 0: %d matrices moved, %d still", moved, still)
		}
		if step > 0 && still != 0 {
			t.Fatalf("step %d: %d matrices did not move", step, still)
		}
	}
	if a.Step != int64(len(params)) {
		t.Fatalf("Step %d", a.Step)
	}
}

// TestDimuonIsScaleInvariantAndLearns: a gradient ×1000 gives the same first step (the
// preconditioner's damping is relative and the matrix sign is normalised), and Dimuon
// lowers a cross-entropy loss.
func TestDimuonIsScaleInvariantAndLearns(t *testing.T) {
	m := tinyModel(t)
	ctx := context.Background()
	cfg := LoraConfig{Rank: 4, Seed: 2, TrainAttn: true, TrainMLP: true, Optimizer: OptimizerConfig{Type: OptimizerDimuon}}
	a, _ := m.NewAdapter(cfg)
	b, _ := m.NewAdapter(cfg)
	req := ceRequest([]int32{7, 1, 22, 13, 5, 40, 2, 9, 31, 17, 4})
	for _, x := range []*Adapter{a, b} {
		if _, err := m.ForwardBackward(ctx, x, req); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range b.Grad.pairs() {
		for i := range q.A {
			q.A[i] *= 1000
		}
		for i := range q.B {
			q.B[i] *= 1000
		}
	}
	p := NewDimuonParams(0.01)
	for _, x := range []*Adapter{a, b} {
		if _, err := m.DimuonStep(ctx, x, p); err != nil {
			t.Fatal(err)
		}
	}
	pa, pb := a.W.pairs(), b.W.pairs()
	for i := range pa {
		for j := range pa[i].B {
			if d := math.Abs(float64(pa[i].B[j] - pb[i].B[j])); d > 1e-6 {
				t.Fatalf("pair %d B[%d]: %v vs %v with the gradient ×1000", i, j, pa[i].B[j], pb[i].B[j])
			}
		}
	}
	var losses []float64
	for range 8 {
		r, err := m.ForwardBackward(ctx, a, req)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, r.Metrics["loss:sum"])
		if _, err := m.DimuonStep(ctx, a, p); err != nil {
			t.Fatal(err)
		}
	}
	if !(losses[len(losses)-1] < 0.8*losses[0]) {
		t.Fatalf("Dimuon did not lower the loss: %v", losses)
	}
}

// TestDimuonStateRoundTripContinuesBitExact saves a Dimuon adapter with its momentum,
// loads it back (as dimuon), and checks both copies continue to identical weights and
// momentum. Pending gradients are never saved (a checkpoint may be published), so the
// save happens between steps.
func TestDimuonStateRoundTripContinuesBitExact(t *testing.T) {
	checkDimuonSaveLoad(t, tinyModel(t))
}

func checkDimuonSaveLoad(t *testing.T, m *Model) {
	ctx := context.Background()
	dimuon := OptimizerConfig{Type: OptimizerDimuon, Version: 1}
	a, _ := m.NewAdapter(LoraConfig{Rank: 8, Alpha: 16, Seed: 3, TrainAttn: true, TrainMLP: true, TrainUnembed: true, Optimizer: dimuon})
	req := ceRequest([]int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21})
	p := DimuonParams{LearningRate: 1e-2, Beta1: 0.9, GradClipNorm: 1, Damping: 0.1, RankLRCorrectionExponent: 0.5}
	for range 3 {
		if _, err := m.ForwardBackward(ctx, a, req); err != nil {
			t.Fatal(err)
		}
		if _, err := m.DimuonStep(ctx, a, p); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := m.SaveAdapter(a, dir, true); err != nil {
		t.Fatal(err)
	}
	b, err := m.LoadAdapterAs(dir, true, dimuon)
	if err != nil {
		t.Fatal(err)
	}
	if b.Config.Optimizer != dimuon || b.Step != 3 {
		t.Fatalf("loaded optimizer %v step %d", b.Config.Optimizer, b.Step)
	}
	for range 3 {
		for _, x := range []*Adapter{a, b} {
			if _, err := m.ForwardBackward(ctx, x, req); err != nil {
				t.Fatal(err)
			}
			if _, err := m.DimuonStep(ctx, x, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, x := range []*Adapter{a, b} {
		if err := m.AdapterToHost(x); err != nil {
			t.Fatal(err)
		}
	}
	for _, lw := range []struct{ x, y *LoraWeights[float32] }{{&a.W, &b.W}, {&a.M, &b.M}} {
		px, py := lw.x.pairs(), lw.y.pairs()
		for i := range px {
			for j := range px[i].A {
				if px[i].A[j] != py[i].A[j] {
					t.Fatalf("pair %d A diverged after reload", i)
				}
			}
			for j := range px[i].B {
				if px[i].B[j] != py[i].B[j] {
					t.Fatalf("pair %d B diverged after reload", i)
				}
			}
		}
	}
}

// TestOptimizerFamiliesAreKeptApart: each family's step refuses the other's adapter, a
// checkpoint records its family, and resuming with the other family is a named error.
func TestOptimizerFamiliesAreKeptApart(t *testing.T) {
	m := tinyModel(t)
	ctx := context.Background()
	dimuon := OptimizerConfig{Type: OptimizerDimuon, Version: 1}
	adam, _ := m.NewAdapter(LoraConfig{Rank: 2, TrainAttn: true})
	dim, _ := m.NewAdapter(LoraConfig{Rank: 2, TrainAttn: true, Optimizer: dimuon})
	if adam.Config.Optimizer.Type != OptimizerAdamW {
		t.Fatalf("default optimizer %v", adam.Config.Optimizer)
	}
	expect := func(err error, want string) {
		t.Helper()
		var ie *InputError
		if err == nil || !errors.As(err, &ie) || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v (an InputError naming %q expected)", err, want)
		}
	}
	_, err := m.DimuonStep(ctx, adam, NewDimuonParams(0.01))
	expect(err, "trains with adamw")
	_, err = m.OptimStep(ctx, dim, AdamParams{LearningRate: 0.01, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
	expect(err, "trains with dimuon v1")
	_, err = m.NewAdapter(LoraConfig{Rank: 2, TrainAttn: true, Optimizer: OptimizerConfig{Type: "sgd"}})
	expect(err, `"sgd" is not supported`)

	dirA, dirD := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "d")
	if err := m.SaveAdapter(adam, dirA, true); err != nil {
		t.Fatal(err)
	}
	if err := m.SaveAdapter(dim, dirD, true); err != nil {
		t.Fatal(err)
	}
	got, err := m.LoadAdapter(dirD, true)
	if err != nil || got.Config.Optimizer != dimuon {
		t.Fatalf("LoadAdapter of a dimuon checkpoint: %v, %v", got, err)
	}
	got, err = m.LoadAdapter(dirA, true)
	if err != nil || got.Config.Optimizer.Type != OptimizerAdamW {
		t.Fatalf("LoadAdapter of an adamw checkpoint: %v, %v", got, err)
	}
	_, err = m.LoadAdapterAs(dirA, true, dimuon)
	expect(err, "optimizer state is adamw, but the run asks for dimuon v1")
	_, err = m.LoadAdapterAs(dirD, true, OptimizerConfig{})
	expect(err, "optimizer state is dimuon v1, but the run asks for adamw")
	// Weights only: the run's optimizer starts fresh.
	got, err = m.LoadAdapterAs(dirA, false, dimuon)
	if err != nil || got.Config.Optimizer != dimuon {
		t.Fatalf("weights-only load as dimuon: %v, %v", got, err)
	}
	if _, err := m.DimuonStep(ctx, got, NewDimuonParams(0.01)); err != nil {
		t.Fatal(err)
	}
}

func TestDimuonAndOptimizerConfigValidation(t *testing.T) {
	ok := NewDimuonParams(1e-3)
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mut  func(p *DimuonParams)
		want string
	}{
		{func(p *DimuonParams) { p.LearningRate = -1 }, "learning_rate"},
		{func(p *DimuonParams) { p.LearningRate = math.Inf(1) }, "learning_rate"},
		{func(p *DimuonParams) { p.GradClipNorm = math.NaN() }, "grad_clip_norm"},
		{func(p *DimuonParams) { p.Beta1 = 1 }, "beta1"},
		{func(p *DimuonParams) { p.Beta1 = -0.1 }, "beta1"},
		{func(p *DimuonParams) { p.Damping = 0 }, "damping"},
		{func(p *DimuonParams) { p.RankLRCorrectionExponent = -1 }, "rank_lr_correction_exponent"},
		{func(p *DimuonParams) { p.RankLRCorrectionExponent = math.NaN() }, "rank_lr_correction_exponent"},
	} {
		p := ok
		tc.mut(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v does not name %s", p, err, tc.want)
		}
	}
	// Non-positive clipping disables it, as the SDK documents.
	p := ok
	p.GradClipNorm = -1
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    OptimizerConfig
		want string // "" = valid
	}{
		{OptimizerConfig{}, ""}, {OptimizerConfig{Type: "adamw"}, ""}, {OptimizerConfig{Type: "dimuon", Version: 1}, ""},
		{OptimizerConfig{Type: "dimuon"}, ""}, {OptimizerConfig{Type: "dimuon", Version: 2}, "version 2"},
		{OptimizerConfig{Type: "adamw", Version: 1}, "adamw has no version"}, {OptimizerConfig{Type: "lion"}, `"lion"`},
	} {
		err := tc.c.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: error %v, want %q", tc.c, err, tc.want)
		}
	}
}

// TestDimuonIsAllOrNothing: a non-finite gradient is refused and discarded, and a step
// that would make a weight non-finite is refused; either way the weights, momentum and
// step count stay as they were.
func TestDimuonIsAllOrNothing(t *testing.T) {
	m := tinyModel(t)
	a, _ := m.NewAdapter(LoraConfig{Rank: 2, TrainAttn: true, Optimizer: OptimizerConfig{Type: OptimizerDimuon}})
	a.Grad.pairs()[0].B[0] = float32(math.Inf(1))
	a.Grad.pairs()[0].B[1] = 1
	a.M.pairs()[0].B[1] = 0.5
	w := append([]float32(nil), a.W.pairs()[0].B...)
	unchanged := func() {
		t.Helper()
		if a.M.pairs()[0].B[1] != 0.5 || a.Step != 0 || a.W.pairs()[0].B[0] != w[0] || a.W.pairs()[0].B[1] != w[1] {
			t.Fatal("a refused step changed the state")
		}
	}
	_, err := m.DimuonStep(context.Background(), a, NewDimuonParams(0.01))
	if err == nil || !strings.Contains(err.Error(), "not finite") || !strings.Contains(err.Error(), "discarded") {
		t.Fatalf("error %v", err)
	}
	unchanged()
	for _, q := range a.Grad.pairs() {
		if !allZero(q.A) || !allZero(q.B) {
			t.Fatal("non-finite gradients were kept")
		}
	}
	// A step moves a weight by at most η·√rank, so finite state cannot overflow; the
	// check after the step still guards it: an infinite weight (which no load or step
	// can produce) is refused rather than carried on.
	a.Grad.pairs()[0].B[1] = 1
	a.W.pairs()[0].B[1] = float32(math.Inf(1))
	w[1] = a.W.pairs()[0].B[1]
	_, err = m.DimuonStep(context.Background(), a, NewDimuonParams(10))
	if err == nil || !strings.Contains(err.Error(), "non-finite; nothing was applied") {
		t.Fatalf("error %v", err)
	}
	unchanged()
}

func allZero(x []float32) bool {
	for _, v := range x {
		if v != 0 {
			return false
		}
	}
	return true
}

// BenchmarkDimuonMatrix times Dimuon's host arithmetic on one LoRA factor of a 7B-shaped
// model at rank 32 (A 32×4096, B 11008×32) and reports it as a multiple of the CPU
// device's AdamW on the same matrix, measured in the same invocation (x_adamw).
func BenchmarkDimuonMatrix(b *testing.B) {
	for _, sh := range []struct{ rows, cols int }{{32, 4096}, {11008, 32}} {
		n := sh.rows * sh.cols
		rng := rand.New(rand.NewPCG(1, 2))
		w, g, m, v, nm := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		fill := func() {
			for i := range g {
				g[i] = float32(rng.NormFloat64())
			}
		}
		adam := func() float64 {
			cpu := device.NewCPU[float32]()
			s := &device.AdamStep{Clip: 1, Decay: 1, B1: 0.9, B2: 0.95, StepSize: 1e-3, BC2Sqrt: 1, Eps: 1e-8}
			const reps = 50
			var total time.Duration
			for range reps {
				fill()
				start := time.Now()
				cpu.AdamW(device.Host(w), device.Host(g), device.Host(m), device.Host(v), s)
				total += time.Since(start)
			}
			return float64(total.Nanoseconds()) / reps
		}()
		b.Run(fmt.Sprintf("%dx%d", sh.rows, sh.cols), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				fill()
				b.StartTimer()
				dimuonMatrix(w, g, m, nm, sh.rows, sh.cols, 32, 1, 0.9, 0.1, 1e-3)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/adam, "x_adamw")
		})
	}
}
