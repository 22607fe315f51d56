package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// scaledRow is the log-softmax of a full log-softmax row divided by temperature (0: as
// is): the distribution a sampled token's logprob is reported under.
func scaledRow(row []float32, temperature float64) []float64 {
	if temperature == 0 {
		temperature = 1
	}
	out := make([]float64, len(row))
	mx := math.Inf(-1)
	for i, v := range row {
		out[i] = float64(v) / temperature
		mx = math.Max(mx, out[i])
	}
	var s float64
	for _, v := range out {
		s += math.Exp(v - mx)
	}
	lse := mx + math.Log(s)
	for i := range out {
		out[i] -= lse
	}
	return out
}

// testTargets builds a dense [n-1, k] target matrix: column 0 the actual next token,
// the others random ids, some cells -1.
func testTargets(prompt []int32, k, vocab int, rng *rand.Rand) *PromptTargets {
	rows := len(prompt) - 1
	t := &PromptTargets{Rows: rows, Cols: k, IDs: make([]int32, rows*k)}
	for r := 0; r < rows; r++ {
		t.IDs[r*k] = prompt[r+1]
		for c := 1; c < k; c++ {
			t.IDs[r*k+c] = int32(rng.IntN(vocab))
			if rng.IntN(4) == 0 {
				t.IDs[r*k+c] = -1
			}
		}
	}
	return t
}

// toCSR keeps the cells of a dense target matrix that are not -1, in CSR form.
func toCSR(t *PromptTargets) *PromptTargets {
	s := &PromptTargets{Rows: t.Rows, Cols: t.Cols, RowStarts: []int{0}}
	for r := 0; r < t.Rows; r++ {
		for c := 0; c < t.Cols; c++ {
			if id := t.IDs[r*t.Cols+c]; id >= 0 {
				s.IDs = append(s.IDs, id)
				s.ColIdx = append(s.ColIdx, c)
			}
		}
		s.RowStarts = append(s.RowStarts, len(s.IDs))
	}
	return s
}

// The new sampling outputs (top-k of sampled tokens, target prompt logprobs dense and
// sparse, alternative prompt tokens) equal what the full softmax of a forward pass over
// the same tokens gives, and asking for them does not change the samples.
func TestSampleOutputsMatchFullSoftmax(t *testing.T) {
	checkSampleOutputs(t, tinyModel(t), 1e-4)
}

// checkSampleOutputs runs TestSampleOutputsMatchFullSoftmax's checks on m, with tol
// between the step's numbers and the forward pass's.
func checkSampleOutputs(t *testing.T, m *Model, tol float64) {
	V := m.Cfg.VocabSize
	rng := rand.New(rand.NewPCG(3, 4))
	prompt := make([]int32, 21)
	for i := range prompt {
		prompt[i] = int32(rng.IntN(V))
	}
	a, err := m.NewAdapter(LoraConfig{Rank: 4, Seed: 5, TrainAttn: true, TrainMLP: true})
	if err != nil {
		t.Fatal(err)
	}
	randomizeAdapter(a, rng)
	lw := &a.W
	for _, temp := range []float64{0, 0.7} {
		seed := int64(9)
		targets := testTargets(prompt, 4, V, rng)
		req := SampleRequest{Prompt: prompt, NumSamples: 2, PromptLogprobs: true, TopKSampleLogprobs: 5, PromptAltTokensK: 3,
			PromptTargets: targets, Params: SampleParams{MaxTokens: 5, Temperature: temp, TopK: -1, TopP: 1, Seed: &seed}}
		res, err := m.Sample(context.Background(), lw, req)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := m.Sample(context.Background(), lw, SampleRequest{Prompt: prompt, NumSamples: 2, Params: req.Params})
		if err != nil {
			t.Fatal(err)
		}
		full := fullLogp(m, lw, prompt)
		near := func(what string, got float32, want float64) {
			t.Helper()
			if math.Abs(float64(got)-want) > tol {
				t.Fatalf("temperature %g: %s: got %v, want %v", temp, what, got, want)
			}
		}
		// Targets: row r scores position r+1 from row r of the forward pass; -1 cells are 0.
		tl := res.PromptTargetLogprobs
		if tl == nil || tl.Rows != len(prompt)-1 || tl.Cols != 4 || len(tl.Logprobs) != len(targets.IDs) || tl.RowStarts != nil {
			t.Fatalf("target logprobs %+v", tl)
		}
		for x, id := range targets.IDs {
			r := x / 4
			if id < 0 {
				near("a -1 cell", tl.Logprobs[x], 0)
				continue
			}
			near("target logprob", tl.Logprobs[x], float64(full[r*V+int(id)]))
			if x%4 == 0 {
				near("target of the next prompt token vs its prompt logprob", tl.Logprobs[x], float64(res.PromptLogprobs[r+1]))
			}
		}
		// The same cells in CSR form give the same numbers, in the request's layout.
		sparse := toCSR(targets)
		sreq := req
		sreq.PromptTargets = sparse
		sres, err := m.Sample(context.Background(), lw, sreq)
		if err != nil {
			t.Fatal(err)
		}
		st := sres.PromptTargetLogprobs
		if len(st.Logprobs) != len(sparse.IDs) || len(st.RowStarts) != len(sparse.RowStarts) || len(st.ColIdx) != len(sparse.ColIdx) {
			t.Fatalf("sparse target logprobs %+v", st)
		}
		for r := 0; r < sparse.Rows; r++ {
			for x := sparse.RowStarts[r]; x < sparse.RowStarts[r+1]; x++ {
				near("sparse target logprob", st.Logprobs[x], float64(tl.Logprobs[r*4+sparse.ColIdx[x]]))
			}
		}
		// Alternatives: k per position 1…n-1, each logprob that of its token at the
		// request's temperature; at temperature 0 all are the argmax.
		alt := res.PromptAltTokens
		if alt == nil || alt.K != 3 || len(alt.Tokens) != 3*(len(prompt)-1) {
			t.Fatalf("alt tokens %+v", alt)
		}
		distinct := map[int32]bool{}
		for r := 0; r < len(prompt)-1; r++ {
			row := scaledRow(full[r*V:(r+1)*V], temp)
			best := 0
			for i := range row {
				if row[i] > row[best] {
					best = i
				}
			}
			for j := 0; j < 3; j++ {
				tok := alt.Tokens[r*3+j]
				distinct[tok] = true
				near("alt token logprob", alt.Logprobs[r*3+j], row[tok])
				if temp == 0 && row[tok] < row[best]-tol {
					t.Fatalf("greedy alternative at row %d is %d, argmax %d", r, tok, best)
				}
			}
		}
		if temp > 0 && len(distinct) < 5 {
			t.Fatalf("temperature %g: only %d distinct alternative tokens", temp, len(distinct))
		}
		// Top-k of sampled tokens: the k best of the distribution the token was drawn
		// from, best first; the sampled token's logprob matches its entry.
		for i, sq := range res.Sequences {
			if len(sq.Tokens) != len(plain.Sequences[i].Tokens) {
				t.Fatal("asking for the outputs changed the samples")
			}
			for j := range sq.Tokens {
				if sq.Tokens[j] != plain.Sequences[i].Tokens[j] {
					t.Fatal("asking for the outputs changed the samples")
				}
			}
			if len(sq.TopK) != len(sq.Tokens) {
				t.Fatalf("sequence %d: %d top-k rows for %d tokens", i, len(sq.TopK), len(sq.Tokens))
			}
			seqFull := fullLogp(m, lw, append(append([]int32(nil), prompt...), sq.Tokens...))
			for j, top := range sq.TopK {
				pos := len(prompt) - 1 + j
				row := scaledRow(seqFull[pos*V:(pos+1)*V], temp)
				order := make([]int, V)
				for x := range order {
					order[x] = x
				}
				sort.SliceStable(order, func(a, b int) bool { return row[order[a]] > row[order[b]] })
				if len(top) != 5 {
					t.Fatalf("top-k row of %d entries", len(top))
				}
				for x, e := range top {
					near("top-k logprob", e.Logprob, row[order[x]])
					near("top-k token's own logprob", e.Logprob, row[e.Token])
					if e.Token == sq.Tokens[j] {
						near("sampled token in its top-k", e.Logprob, float64(sq.Logprobs[j]))
					}
				}
				if temp == 0 && top[0].Token != sq.Tokens[j] && math.Abs(float64(top[0].Logprob-sq.Logprobs[j])) > tol {
					t.Fatalf("greedy token %d is not the top-1 %d", sq.Tokens[j], top[0].Token)
				}
			}
		}
	}
}

// Alternative prompt tokens are draws from the model's distribution: over many draws at
// one position, each likely token's frequency is within a few standard errors of its
// probability.
func TestPromptAltTokensFollowTheDistribution(t *testing.T) {
	m := tinyModel(t)
	V := m.Cfg.VocabSize
	prompt := []int32{7, 300, 12}
	const k = 4000
	seed := int64(1)
	res, err := m.Sample(context.Background(), nil, SampleRequest{Prompt: prompt, NumSamples: 1, PromptAltTokensK: k,
		Params: SampleParams{MaxTokens: 1, Temperature: 0.2, TopK: -1, TopP: 1, Seed: &seed}})
	if err != nil {
		t.Fatal(err)
	}
	row := scaledRow(fullLogp(m, nil, prompt)[V:2*V], 0.2)
	count := make([]int, V)
	for _, tok := range res.PromptAltTokens.Tokens[k:] { // row 1: position 2
		count[tok]++
	}
	checked := 0
	for tok, lp := range row {
		p := math.Exp(lp)
		if p < 0.02 {
			continue
		}
		checked++
		t.Logf("token %d: probability %.4f, drawn %d of %d", tok, p, count[tok], k)
		sd := math.Sqrt(p * (1 - p) / k)
		if f := float64(count[tok]) / k; math.Abs(f-p) > 5*sd {
			t.Fatalf("token %d drawn %.4f of the time, probability %.4f (sd %.4f)", tok, f, p, sd)
		}
	}
	if checked == 0 {
		t.Fatal("no token with probability ≥ 2% to check")
	}
}

// Bad target matrices and counts are refused by name before anything runs.
func TestValidatePromptOutputs(t *testing.T) {
	c := tinyModel(t).Cfg
	prompt := []int32{1, 2, 3}
	base := SampleRequest{Prompt: prompt, NumSamples: 1, Params: SampleParams{MaxTokens: 1, Temperature: 1, TopK: -1, TopP: 1}}
	for _, tc := range []struct {
		name string
		mod  func(r *SampleRequest)
		want string
	}{
		{"negative top-k", func(r *SampleRequest) { r.TopKSampleLogprobs = -1 }, "topk_sample_logprobs"},
		{"negative alt k", func(r *SampleRequest) { r.PromptAltTokensK = -2 }, "prompt_alt_tokens_k"},
		{"rows", func(r *SampleRequest) { r.PromptTargets = &PromptTargets{Rows: 3, Cols: 1, IDs: []int32{1, 2, 3}} }, "len(prompt)-1 = 2"},
		{"no columns", func(r *SampleRequest) { r.PromptTargets = &PromptTargets{Rows: 2, Cols: 0} }, "at least 1"},
		{"dense size", func(r *SampleRequest) { r.PromptTargets = &PromptTargets{Rows: 2, Cols: 2, IDs: []int32{1, 2, 3}} }, "3 ids"},
		{"vocabulary", func(r *SampleRequest) {
			r.PromptTargets = &PromptTargets{Rows: 2, Cols: 1, IDs: []int32{1, int32(c.VocabSize)}}
		}, "vocabulary"},
		{"below -1", func(r *SampleRequest) { r.PromptTargets = &PromptTargets{Rows: 2, Cols: 1, IDs: []int32{1, -2}} }, "-2"},
		{"all -1", func(r *SampleRequest) { r.PromptTargets = &PromptTargets{Rows: 2, Cols: 1, IDs: []int32{-1, -1}} }, "names no token"},
		{"crow length", func(r *SampleRequest) {
			r.PromptTargets = &PromptTargets{Rows: 2, Cols: 2, IDs: []int32{1}, RowStarts: []int{0, 1}, ColIdx: []int{0}}
		}, "sparse_crow_indices"},
		{"crow past values", func(r *SampleRequest) {
			r.PromptTargets = &PromptTargets{Rows: 2, Cols: 2, IDs: []int32{1}, RowStarts: []int{0, 9, 1}, ColIdx: []int{0}}
		}, "sparse_crow_indices"},
		{"column range", func(r *SampleRequest) {
			r.PromptTargets = &PromptTargets{Rows: 2, Cols: 2, IDs: []int32{1}, RowStarts: []int{0, 1, 1}, ColIdx: []int{2}}
		}, "sparse_col_indices"},
		{"column repeated", func(r *SampleRequest) {
			r.PromptTargets = &PromptTargets{Rows: 2, Cols: 2, IDs: []int32{1, 2}, RowStarts: []int{0, 2, 2}, ColIdx: []int{1, 1}}
		}, "sparse_col_indices"},
	} {
		req := base
		tc.mod(&req)
		err := ValidateSample(c, req)
		if err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}
