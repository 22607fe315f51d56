package engine

import (
	"container/heap"
	"math"
)

// TokenEvent is one sampled token of one sequence, reported through SampleHooks.OnToken.
type TokenEvent struct {
	Seq     int // the sequence's index, 0 … NumSamples-1
	Token   int32
	Logprob float32 // as in Sequence.Logprobs
	// Top holds the SampleHooks.TopLogprobs most likely tokens of this step, best first,
	// with log-probabilities under the same distribution as Logprob.
	Top []TokenLogprob
	// Stop is set on the sequence's last token: why it ended.
	Stop StopReason
}

// topLogprobs returns the k most likely tokens of logits under the distribution pick
// reports logprobs in: logits/temperature (temperature 0: unscaled), log-softmaxed. It
// selects with a k-sized heap, not a sort of the whole vocabulary.
func topLogprobs(logits []float32, temperature float64, k int) []TokenLogprob {
	if temperature == 0 {
		temperature = 1
	}
	if k > len(logits) {
		k = len(logits)
	}
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v)/temperature)
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v)/temperature - mx)
	}
	lse := mx + math.Log(sum)
	h := make(minHeap, 0, k)
	for i, v := range logits {
		switch {
		case len(h) < k:
			heap.Push(&h, TokenLogprob{Token: int32(i), Logprob: v})
		case v > h[0].Logprob:
			h[0] = TokenLogprob{Token: int32(i), Logprob: v}
			heap.Fix(&h, 0)
		}
	}
	out := make([]TokenLogprob, len(h))
	for i := len(out) - 1; i >= 0; i-- {
		t := heap.Pop(&h).(TokenLogprob)
		t.Logprob = float32(float64(t.Logprob)/temperature - lse)
		out[i] = t
	}
	return out
}

// minHeap orders by logit, smallest first; ties put the higher token id first, so the
// lower id of equal logits survives (the order topK uses).
type minHeap []TokenLogprob

func (h minHeap) Len() int { return len(h) }
func (h minHeap) Less(i, j int) bool {
	if h[i].Logprob != h[j].Logprob {
		return h[i].Logprob < h[j].Logprob
	}
	return h[i].Token > h[j].Token
}
func (h minHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)   { *h = append(*h, x.(TokenLogprob)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
