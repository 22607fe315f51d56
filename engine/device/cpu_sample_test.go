package device

import (
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
