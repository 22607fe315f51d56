package engine

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"strings"

	"github.com/tuft-go/tuft/engine/device"
)

// SampleHooks report the phases of a sample request (for request tracing). Phases are
// "preprocess", "prefill", "decode" and "postprocess"; nil functions are skipped. Every
// phase that starts also ends, errors included.
type SampleHooks struct {
	OnPhase      func(phase string, start bool)
	OnFirstToken func()
	// OnToken receives every sampled token as soon as it is drawn, before the next
	// decode step, so a caller can stream text while generation goes on. It runs on the
	// sampling goroutine: it must return quickly.
	OnToken func(TokenEvent)
	// TopLogprobs > 0 asks for that many most likely tokens in each TokenEvent.Top.
	TopLogprobs int
}

func (h SampleHooks) phase(name string, start bool) {
	if h.OnPhase != nil {
		h.OnPhase(name, start)
	}
}

// Draw is one token to draw from a distribution over the vocabulary: logits are divided
// by Temperature, then top-k and then top-p truncate the distribution (HF's order), and
// the token is drawn with the uniform variate U ∈ [0, 1) from what remains. Temperature
// 0 means argmax (U unused). The log-probability reported for the token is under the
// temperature-scaled distribution before truncation (at temperature 0, under the
// unscaled one). TopK ≤ 0 means no limit; TopP 1 no nucleus filtering.
type Draw struct {
	Temperature float64
	TopK        int
	TopP        float64
	U           float64
	// Top > 0 also returns the Top most likely tokens of the distribution the reported
	// log-probability is under (StepOut.DrawTop), for streaming clients' top logprobs.
	Top int
}

// StepSeq is one sequence's part of a decode step: new tokens that continue its cache,
// and what to compute from them.
type StepSeq struct {
	Adapter *LoraWeights[float32] // nil: the base model
	Cache   *KVCache[float32]     // positions before Tokens; receives theirs
	Tokens  []int32               // ≥ 1: a prompt, a chunk of one, or the last sampled token
	// Draws are tokens to draw after the last of Tokens (several: samples of one prompt).
	Draws []Draw
	// Targets, when set, has one entry per token: the log-probability of Targets[i]
	// after Tokens[i] is returned (-1: none, and that row's logits are not computed), as
	// for prompt logprobs.
	Targets []int32
	// TopK > 0 returns the TopK most likely next tokens after each of Tokens.
	TopK int
	// TargetSets, when set, has one entry per token: the log-probabilities of those ids
	// after Tokens[i] are returned (StepOut.TargetSetLogprobs; NaN for an id of -1), under
	// the same distribution as Targets'.
	TargetSets [][]int32
	// PositionDraws, when set, has one entry per token: tokens to draw from the
	// distribution after Tokens[i] (StepOut.PositionTokens), as Draws are drawn after the
	// last token.
	PositionDraws [][]Draw
}

// StepOut is what a decode step computed for one StepSeq.
type StepOut struct {
	Tokens         []int32   // one per Draw
	Logprobs       []float32 // of Tokens
	TargetLogprobs []float32 // one per token when Targets was set (NaN where it was -1)
	TopK           [][]TokenLogprob
	DrawTop        [][]TokenLogprob // one per Draw: its Top most likely tokens (nil when Top is 0)
	// TargetSetLogprobs, PositionTokens and PositionLogprobs answer TargetSets and
	// PositionDraws, one entry per token (nil where nothing was asked).
	TargetSetLogprobs [][]float32
	PositionTokens    [][]int32
	PositionLogprobs  [][]float32
}

// DecodeStep runs one iteration for a batch of sequences, each with its own adapter and
// KV cache (all caches from one pool of this model): their new tokens go through the
// model together (one pass over the base weights), their keys and values are appended
// to their caches, and tokens are drawn from the last position of each. Prefill chunks
// and single-token decodes mix freely. On error no cache changes length.
//
// This is the step API an iteration-level scheduler builds on: it decides each step
// which sequences run and with how many tokens, owns the caches, and stops, forks or
// drops sequences between steps.
func (m *Model) DecodeStep(ctx context.Context, seqs []StepSeq) ([]StepOut, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := m.checkStep(seqs); err != nil {
		return nil, err
	}
	b, err := m.gatherStep(seqs)
	if err != nil {
		return nil, err
	}
	// A step of one token per sequence is the same kernels with the same arguments each
	// time for the same shape: on a device with graphs it is replayed as one (its
	// per-step values in device memory; block tables padded to a fixed length).
	key, tabCap := m.graphKey(b)
	var p *pass[float32]
	run := func(d Device) {
		p = newPassTables(m.Cfg, d, m.dw, m.rope, b.segs, b.slots, tabCap)
		b.logits = p.forward(b.tokens, false, b.lmRows).logits
	}
	if g, ok := m.dev.(device.Grapher[float32]); !ok || key == "" || !g.Graph(key, run) {
		if bu, ok := m.dev.(device.Burster); ok {
			bu.Burst(func() { run(m.dev) })
		} else {
			run(m.dev)
		}
	}
	p.d = m.dev // the graph's device view is for the graph's operations only
	defer p.release()
	// Draw from the raw logits first; log-softmax (for targets and top-k) is in place.
	b.draw()
	if b.normalise && len(b.lmRows) > 0 {
		m.dev.LogSoftmax(b.logits, len(b.lmRows), m.Cfg.VocabSize)
		b.targets()
		b.topK()
	}
	return b.commit()
}

// graphKey is the shape of a decode step for device.Grapher ("" when the device runs no
// graphs or the step is not one token per sequence): rows, each row's adapter, the rows
// with logits, and tabCap, the block-table length the step uploads: every sequence's
// table padded to the longest one's rounded up to a power of two (at most the model's
// positions), so that a shape's upload sizes stay the same for many steps and a long
// context's tables are uploaded padded by at most twice their length.
func (m *Model) graphKey(b *stepBatch) (string, int) {
	if g, ok := m.dev.(device.Grapher[float32]); !ok || !g.GraphsEnabled() {
		return "", 0
	}
	longest := 1
	for _, sg := range b.segs {
		if sg.n != 1 || sg.kv == nil {
			return "", 0
		}
		longest = max(longest, len(sg.kv.blocks))
	}
	blockLen := b.segs[0].kv.pool.blockLen
	perSeq := min(1<<bits.Len(uint(longest-1)), (m.Cfg.MaxPositions+blockLen-1)/blockLen)
	tabCap := len(b.segs) * perSeq
	// The model is in the key too (its weights are kernel arguments; so are the KV pool's
	// tensors, but a request's own pool is often a new one at the same device addresses,
	// which the device's comparison with the capture accepts).
	var k strings.Builder
	fmt.Fprintf(&k, "decode model=%p rows=%d tables=%d adapters=", m.dw, len(b.segs), tabCap)
	for _, sg := range b.segs {
		fmt.Fprintf(&k, "%p,", sg.lw)
	}
	fmt.Fprintf(&k, " logits=%v", b.lmRows)
	return k.String(), tabCap
}

// stepBatch is a decode step being run, in the named steps of DecodeStep: gatherStep
// (inputs, KV slots, which rows get logits), the forward pass, draw (with draws' top
// logprobs), log-softmax, targets (and target sets), topK, commit.
type stepBatch struct {
	seqs []StepSeq
	d    Device
	V    int
	// The batch's inputs: every sequence's new tokens, their KV slots and segments.
	tokens, slots []int32
	segs          []segment[float32]
	// Logits are computed only for the rows something is asked of: the last row of a
	// sequence with draws, rows with a target, every row with top-k.
	lmRows    []int32
	logitRow  [][]int // per sequence and token: its row of the logits, or -1
	normalise bool    // something needs log-probabilities (targets, target sets, top-k)
	logits    device.Tensor[float32]
	outs      []StepOut
}

// gatherStep lays the sequences out as one batch: their tokens, the KV slots reserved
// for them, their segments (with each adapter's device copy, made once) and the rows of
// the logits each needs.
func (m *Model) gatherStep(seqs []StepSeq) (*stepBatch, error) {
	d := m.dev
	b := &stepBatch{seqs: seqs, d: d, V: m.Cfg.VocabSize, lmRows: []int32{}, logitRow: make([][]int, len(seqs)),
		segs: make([]segment[float32], len(seqs)), outs: make([]StepOut, len(seqs))}
	onDev := map[*LoraWeights[float32]]*devLora[float32]{}
	for i, s := range seqs {
		sl, err := s.Cache.reserve(len(s.Tokens))
		if err != nil {
			return nil, fmt.Errorf("decode step: sequence %d: %w", i, err)
		}
		lw, ok := onDev[s.Adapter]
		if !ok && s.Adapter != nil {
			lw = loraOn(d, s.Adapter)
			onDev[s.Adapter] = lw
		}
		start := len(b.tokens)
		b.segs[i] = segment[float32]{start: start, n: len(s.Tokens), pos: s.Cache.Len(), lw: lw, kv: s.Cache}
		b.tokens = append(b.tokens, s.Tokens...)
		b.slots = append(b.slots, sl...)
		b.logitRow[i] = make([]int, len(s.Tokens))
		for j := range s.Tokens {
			b.logitRow[i][j] = -1
			if s.TopK > 0 || (s.Targets != nil && s.Targets[j] >= 0) || (j == len(s.Tokens)-1 && len(s.Draws) > 0) ||
				(s.TargetSets != nil && len(s.TargetSets[j]) > 0) || (s.PositionDraws != nil && len(s.PositionDraws[j]) > 0) {
				b.logitRow[i][j] = len(b.lmRows)
				b.lmRows = append(b.lmRows, int32(start+j))
			}
		}
		b.normalise = b.normalise || s.TopK > 0 || s.Targets != nil || s.TargetSets != nil
	}
	return b, nil
}

// draw draws every sequence's tokens from the raw logits: its Draws after its last
// token, then its PositionDraws, with the top logprobs of the draws that ask for them.
func (b *stepBatch) draw() {
	seqs, outs, d, V := b.seqs, b.outs, b.d, b.V
	var draws []device.Draw
	for i, s := range seqs {
		for _, dr := range s.Draws {
			draws = append(draws, device.Draw{Row: b.logitRow[i][len(s.Tokens)-1], Temperature: dr.Temperature, TopK: dr.TopK, TopP: dr.TopP, U: dr.U})
		}
	}
	nLast := len(draws) // the draws after each sequence's last token; then the positions'
	for i, s := range seqs {
		for j, pd := range s.PositionDraws {
			for _, dr := range pd {
				draws = append(draws, device.Draw{Row: b.logitRow[i][j], Temperature: dr.Temperature, TopK: dr.TopK, TopP: dr.TopP, U: dr.U})
			}
		}
	}
	if len(draws) == 0 {
		return
	}
	// Top logprobs of a draw come from the raw row, read before anything else touches
	// the logits (a row of a few thousand floats, only when a client asks for them).
	for i, s := range seqs {
		for j, dr := range s.Draws {
			if dr.Top <= 0 {
				continue
			}
			if outs[i].DrawTop == nil {
				outs[i].DrawTop = make([][]TokenLogprob, len(s.Draws))
			}
			r := b.logitRow[i][len(s.Tokens)-1]
			row := make([]float32, V)
			d.Download(row, b.logits.Slice(r*V, (r+1)*V))
			outs[i].DrawTop[j] = topLogprobs(row, dr.Temperature, dr.Top)
		}
	}
	toks, lps := d.Sample(b.logits, V, draws)
	k := 0
	for i, s := range seqs {
		outs[i].Tokens, outs[i].Logprobs = toks[k:k+len(s.Draws)], lps[k:k+len(s.Draws)]
		k += len(s.Draws)
	}
	k = nLast
	for i, s := range seqs {
		if s.PositionDraws == nil {
			continue
		}
		outs[i].PositionTokens = make([][]int32, len(s.Tokens))
		outs[i].PositionLogprobs = make([][]float32, len(s.Tokens))
		for j, pd := range s.PositionDraws {
			if len(pd) > 0 {
				outs[i].PositionTokens[j], outs[i].PositionLogprobs[j] = toks[k:k+len(pd)], lps[k:k+len(pd)]
				k += len(pd)
			}
		}
	}
}

// targets gathers, from the log-softmaxed logits, the log-probabilities of every
// sequence's Targets and TargetSets (NaN for an id of -1) in one device gather.
func (b *stepBatch) targets() {
	seqs, outs, V := b.seqs, b.outs, b.V
	var idx []int64
	for i, s := range seqs {
		for j, t := range s.Targets {
			if t >= 0 {
				idx = append(idx, int64(b.logitRow[i][j])*int64(V)+int64(t))
			}
		}
	}
	// The target sets' entries follow the targets' (an id of -1 gathers nothing).
	nTargets := len(idx)
	for i, s := range seqs {
		for j, set := range s.TargetSets {
			for _, t := range set {
				if t >= 0 {
					idx = append(idx, int64(b.logitRow[i][j])*int64(V)+int64(t))
				}
			}
		}
	}
	vals := make([]float32, len(idx))
	if len(idx) > 0 {
		b.d.Gather(vals, b.logits, idx)
	}
	ks := nTargets
	for i, s := range seqs {
		if s.TargetSets == nil {
			continue
		}
		outs[i].TargetSetLogprobs = make([][]float32, len(s.Tokens))
		for j, set := range s.TargetSets {
			if len(set) == 0 {
				continue
			}
			row := make([]float32, len(set))
			for x, t := range set {
				if t < 0 {
					row[x] = float32(math.NaN())
					continue
				}
				row[x] = vals[ks]
				ks++
			}
			outs[i].TargetSetLogprobs[j] = row
		}
	}
	k := 0
	for i, s := range seqs {
		if s.Targets == nil {
			continue
		}
		outs[i].TargetLogprobs = make([]float32, len(s.Tokens))
		for j, t := range s.Targets {
			if t < 0 {
				outs[i].TargetLogprobs[j] = float32(math.NaN())
				continue
			}
			outs[i].TargetLogprobs[j] = vals[k]
			k++
		}
	}
}

// topK finds the TopK most likely next tokens after each token of the sequences that
// ask, from the log-softmaxed logits.
func (b *stepBatch) topK() {
	V := b.V
	for i, s := range b.seqs {
		if s.TopK <= 0 {
			continue
		}
		rows := make([]int32, len(s.Tokens))
		for j := range rows {
			rows[j] = int32(b.logitRow[i][j])
		}
		toks, lps := b.d.TopK(b.logits, V, rows, s.TopK)
		kk := min(s.TopK, V)
		b.outs[i].TopK = make([][]TokenLogprob, len(s.Tokens))
		for j := range b.outs[i].TopK {
			tl := make([]TokenLogprob, kk)
			for x := range tl {
				tl[x] = TokenLogprob{Token: toks[j*kk+x], Logprob: lps[j*kk+x]}
			}
			b.outs[i].TopK[j] = tl
		}
	}
}

// commit checks the device and, only then, makes the new positions part of every
// sequence's cache: on error no cache changes length.
func (b *stepBatch) commit() ([]StepOut, error) {
	if err := b.d.Err(); err != nil {
		return nil, fmt.Errorf("decode step on %s: %w", b.d.Name(), err)
	}
	for _, s := range b.seqs {
		s.Cache.commit(len(s.Tokens))
	}
	runtime.KeepAlive(b.seqs) // the adapters' device copies are in use until here
	return b.outs, nil
}

// checkStep validates a decode step's sequences.
func (m *Model) checkStep(seqs []StepSeq) error {
	c := m.Cfg
	if len(seqs) == 0 {
		return Inputf("decode step has no sequences")
	}
	seen := map[*KVCache[float32]]bool{}
	for i, s := range seqs {
		switch {
		case s.Cache == nil:
			return Inputf("decode step: sequence %d has no KV cache", i)
		case s.Cache.pool.owner != m.dw || s.Cache.pool != seqs[0].Cache.pool:
			return Inputf("decode step: sequence %d's KV cache is not from the step's pool of this model", i)
		case seen[s.Cache]:
			return Inputf("decode step: sequence %d's KV cache appears twice", i)
		case len(s.Tokens) == 0:
			return Inputf("decode step: sequence %d has no tokens", i)
		case s.Cache.Len()+len(s.Tokens) > c.MaxPositions:
			return Inputf("decode step: sequence %d would hold %d positions, more than the model's %d", i, s.Cache.Len()+len(s.Tokens), c.MaxPositions)
		case s.Targets != nil && len(s.Targets) != len(s.Tokens):
			return Inputf("decode step: sequence %d has %d targets for %d tokens", i, len(s.Targets), len(s.Tokens))
		case s.TopK < 0:
			return Inputf("decode step: sequence %d: top_k %d must be ≥ 0", i, s.TopK)
		}
		seen[s.Cache] = true
		for j, t := range s.Tokens {
			if t < 0 || int(t) >= c.VocabSize {
				return Inputf("decode step: sequence %d: token %d at %d is outside the vocabulary [0, %d)", i, t, j, c.VocabSize)
			}
		}
		for j, t := range s.Targets {
			if t < -1 || int(t) >= c.VocabSize {
				return Inputf("decode step: sequence %d: target %d at %d is outside the vocabulary [0, %d)", i, t, j, c.VocabSize)
			}
		}
		if s.TargetSets != nil && len(s.TargetSets) != len(s.Tokens) {
			return Inputf("decode step: sequence %d has %d target sets for %d tokens", i, len(s.TargetSets), len(s.Tokens))
		}
		for j, set := range s.TargetSets {
			for _, t := range set {
				if t < -1 || int(t) >= c.VocabSize {
					return Inputf("decode step: sequence %d: target %d at %d is outside the vocabulary [0, %d)", i, t, j, c.VocabSize)
				}
			}
		}
		if s.PositionDraws != nil && len(s.PositionDraws) != len(s.Tokens) {
			return Inputf("decode step: sequence %d has %d position draw lists for %d tokens", i, len(s.PositionDraws), len(s.Tokens))
		}
		all := s.Draws
		for _, pd := range s.PositionDraws {
			all = append(all[:len(all):len(all)], pd...)
		}
		for j, dr := range all {
			if dr.Temperature < 0 || math.IsNaN(dr.Temperature) || math.IsInf(dr.Temperature, 0) || dr.TopP <= 0 || dr.TopP > 1 ||
				math.IsNaN(dr.TopP) || dr.U < 0 || dr.U >= 1 || math.IsNaN(dr.U) {
				return Inputf("decode step: sequence %d draw %d: temperature %g, top_p %g or uniform %g out of range", i, j, dr.Temperature, dr.TopP, dr.U)
			}
		}
	}
	return nil
}

// Sample generates req.NumSamples continuations of req.Prompt with the adapter weights lw
// (nil: the base model).
func (m *Model) Sample(ctx context.Context, lw *LoraWeights[float32], req SampleRequest) (SampleResult, error) {
	return m.SampleWithHooks(ctx, lw, req, SampleHooks{})
}

// SampleWithHooks is Sample with phase callbacks.
//
// Semantics are Generation's (generation.go), which an iteration-level scheduler drives
// too: see Draw for how each token is drawn; a sequence stops at an EOS token of the
// model, a stop token, or when the decoded text contains a stop string, the stopping
// token included. The same seed gives the same output on the same device.
//
// The prompt is prefilled once into a KV cache that the samples then share (forked,
// copy on write), and every step decodes all live samples together.
func (m *Model) SampleWithHooks(ctx context.Context, lw *LoraWeights[float32], req SampleRequest, h SampleHooks) (SampleResult, error) {
	p := req.Params
	open := ""
	phase := func(name string) {
		if open != "" {
			h.phase(open, false)
		}
		if open = name; name != "" {
			h.phase(name, true)
		}
	}
	defer phase("")
	phase("preprocess")
	g, err := NewGeneration(m, req, h.TopLogprobs)
	if err != nil {
		return SampleResult{}, err
	}
	n := len(req.Prompt)
	// The prompt's blocks, and per sample the blocks its continuation can reach (the
	// prompt's partly filled last block included: writing it makes a copy).
	bl := KVBlockLen
	pool, err := m.NewKVPool((n+bl-1)/bl + req.NumSamples*((n+p.MaxTokens+bl-1)/bl-n/bl))
	if err != nil {
		return SampleResult{}, err
	}
	defer pool.Close()
	if err := ctx.Err(); err != nil {
		return SampleResult{}, err
	}

	phase("prefill")
	base := pool.NewCache()
	first := StepSeq{Adapter: lw, Cache: base, Tokens: req.Prompt, Draws: g.Draws(-1)}
	g.PromptStep(&first, 0, n)
	outs, err := m.DecodeStep(ctx, []StepSeq{first})
	if err != nil {
		return SampleResult{}, err
	}
	g.ApplyPrompt(0, outs[0])

	phase("decode")
	if h.OnFirstToken != nil {
		h.OnFirstToken()
	}
	type live struct {
		idx   int
		cache *KVCache[float32]
		tok   int32 // drawn, not yet appended
		lp    float32
		top   []TokenLogprob // the draw's top logprobs
	}
	act := make([]*live, req.NumSamples)
	for i := range act {
		act[i] = &live{idx: i, cache: base.Fork(), tok: outs[0].Tokens[i], lp: outs[0].Logprobs[i]}
		if outs[0].DrawTop != nil {
			act[i].top = outs[0].DrawTop[i]
		}
	}
	base.Release()
	for len(act) > 0 {
		var next []*live
		var steps []StepSeq
		for _, s := range act {
			ev := g.Accept(s.idx, s.tok, s.lp, s.top)
			if h.OnToken != nil {
				h.OnToken(ev)
			}
			if ev.Stop == "" {
				next = append(next, s)
				steps = append(steps, StepSeq{Adapter: lw, Cache: s.cache, Tokens: []int32{s.tok}, Draws: g.Draws(s.idx)})
				continue
			}
			s.cache.Release()
		}
		act = next
		if len(act) == 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			return SampleResult{}, err
		}
		outs, err := m.DecodeStep(ctx, steps)
		if err != nil {
			return SampleResult{}, err
		}
		for i, s := range act {
			s.tok, s.lp = outs[i].Tokens[0], outs[i].Logprobs[0]
			if outs[i].DrawTop != nil {
				s.top = outs[i].DrawTop[0]
			}
		}
	}
	phase("postprocess")
	return g.Result(), nil
}
