package engine

import "testing"

// TestLoraParamCountMatchesAllocation checks the count against the tensors an adapter
// of each shape really allocates.
func TestLoraParamCountMatchesAllocation(t *testing.T) {
	c := Config{Hidden: 32, Intermediate: 64, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 8, VocabSize: 100}
	for _, cfg := range []LoraConfig{
		{Rank: 1, TrainAttn: true},
		{Rank: 4, TrainMLP: true},
		{Rank: 8, TrainAttn: true, TrainMLP: true, TrainUnembed: true},
		{Rank: 2, TrainUnembed: true},
	} {
		lw := zeroLike(c, cfg)
		var want int64
		for _, p := range lw.pairs() {
			want += int64(len(p.A) + len(p.B))
		}
		if got := LoraParamCount(c, cfg); got != want {
			t.Errorf("%+v: LoraParamCount = %d, allocated %d", cfg, got, want)
		}
	}
	if LoraParamCount(c, LoraConfig{}) != 0 {
		t.Error("rank 0 must count nothing")
	}
}
