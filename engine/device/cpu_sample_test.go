package device

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// Sample prepares the distinct rows' distributions in parallel: the tokens and logprobs
// are those of one goroutine, draw for draw, whatever the number of workers, with draws
// that share a row (and parameters) and draws that do not, interleaved.
func TestSampleParallelIsSerial(t *testing.T) {
	rows, cols := 7, 3000
	rng := rand.New(rand.NewPCG(9, 10))
	logits := make([]float32, rows*cols)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	var draws []Draw
	for r := 0; r < rows; r++ {
		draws = append(draws, Draw{Row: r, Temperature: 0, TopP: 1})
		for _, u := range []float64{0.1, 0.6, 0.95} {
			draws = append(draws, Draw{Row: r, Temperature: 0.9, TopK: 40, TopP: 0.9, U: u})
		}
		draws = append(draws, Draw{Row: r, Temperature: 1.2, TopP: 1, U: 0.5})
	}
	old := runtime.GOMAXPROCS(1)
	wt, wl := NewCPU[float32]().Sample(Host(logits), cols, draws)
	for _, procs := range []int{2, 3} {
		runtime.GOMAXPROCS(procs)
		gt, gl := NewCPU[float32]().Sample(Host(logits), cols, draws)
		for i := range draws {
			if gt[i] != wt[i] || gl[i] != wl[i] {
				t.Fatalf("GOMAXPROCS %d draw %d %+v: %d %v, serially %d %v", procs, i, draws[i], gt[i], gl[i], wt[i], wl[i])
			}
		}
	}
	runtime.GOMAXPROCS(old)
}

// TestGreedyIsTopOne: a greedy draw (which computes no row of log-probabilities) picks
// the token and returns the log-probability, bit for bit, that a temperature-1 top-1
// draw computes from the full log-softmax, ties going to the first index; a row with a
// NaN picks token 0 with a NaN log-probability, as the full path does.
func TestGreedyIsTopOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const V = 5000
	logits := make([]float32, 3*V)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 4)
	}
	logits[V+17], logits[V+4000] = 30, 30 // a tie in row 1
	logits[2*V+9] = float32(math.NaN())
	c := NewCPU[float32]()
	for row := 0; row < 3; row++ {
		g, glp := c.Sample(Host(logits), V, []Draw{{Row: row, Temperature: 0, TopP: 1}})
		k, klp := c.Sample(Host(logits), V, []Draw{{Row: row, Temperature: 1, TopK: 1, TopP: 1, U: 0.5}})
		if row == 2 {
			if g[0] != 0 || !math.IsNaN(float64(glp[0])) {
				t.Fatalf("row with a NaN: greedy gave token %d logprob %v, want 0 and NaN", g[0], glp[0])
			}
			continue
		}
		if g[0] != k[0] || math.Float32bits(glp[0]) != math.Float32bits(klp[0]) {
			t.Fatalf("row %d: greedy gave token %d logprob %v, top-1 token %d logprob %v", row, g[0], glp[0], k[0], klp[0])
		}
		if row == 1 && g[0] != 17 {
			t.Fatalf("tie: greedy took token %d, want the first, 17", g[0])
		}
	}
}
