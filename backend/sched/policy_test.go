package sched

import (
	"fmt"
	"slices"
	"testing"
)

// counterStep is a step oracle over counters: each tenant's candidates want some tokens
// (a decoding sequence 1, a prompt chunk more), and a pool holds free tokens; a tenant
// whose candidate finds the pool empty waits (its line blocks).
type counterStep struct {
	want [][]int // remaining wants, updated
	free int
	got  []int // tokens granted per tenant
	rows []int // candidates that got tokens, per tenant
}

func (o *counterStep) offer(t, c, most int) offer {
	w := o.want[t][c]
	if w == 0 {
		return offer{}
	}
	if o.free == 0 {
		return offer{block: true}
	}
	take := min(w, most, o.free)
	if w == o.want[t][c] && take > 0 {
		o.rows[t]++
	}
	o.want[t][c] -= take
	o.free -= take
	o.got[t] += take
	return offer{took: take, stay: o.want[t][c] > 0}
}

// The decode step's policy shares the budget max-min fairly, rotates who goes first,
// keeps a blocked tenant's deficit and drops a served one's, all without a pool.
func TestFillStepSharesTheBudget(t *testing.T) {
	ones := func(n int) []int {
		w := make([]int, n)
		for i := range w {
			w[i] = 1
		}
		return w
	}
	for _, c := range []struct {
		name        string
		want        [][]int
		free        int
		start       int
		budget      int
		deficit     []int
		got         []int
		deficitLeft []int
	}{
		{"many sequences against one", [][]int{ones(10), ones(1)}, 100, 0, 6, []int{0, 0}, []int{5, 1}, []int{0, 0}},
		{"a prompt chunk against decoders", [][]int{{100}, ones(4)}, 100, 0, 8, []int{0, 0}, []int{4, 4}, []int{0, 0}},
		{"three tenants, a short budget", [][]int{ones(5), ones(5), ones(5)}, 100, 0, 7, []int{0, 0, 0}, []int{3, 2, 2}, []int{0, 0, 0}},
		{"the turn rotates", [][]int{ones(5), ones(5)}, 100, 1, 1, []int{0, 0}, []int{0, 1}, []int{0, 0}},
		{"a blocked line keeps its deficit", [][]int{{5}, ones(3)}, 2, 0, 8, []int{0, 0}, []int{1, 1}, []int{1, 1}},
		{"a served tenant loses its deficit", [][]int{ones(1), ones(10)}, 100, 0, 4, []int{5, 0}, []int{1, 3}, []int{0, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := &counterStep{free: c.free, got: make([]int, len(c.want)), rows: make([]int, len(c.want))}
			counts := make([]int, len(c.want))
			for i, w := range c.want {
				o.want = append(o.want, slices.Clone(w))
				counts[i] = len(w)
			}
			deficit := slices.Clone(c.deficit)
			fillStep(deficit, counts, c.start, c.budget, o)
			if !slices.Equal(o.got, c.got) {
				t.Errorf("tokens per tenant %v, want %v", o.got, c.got)
			}
			total := 0
			for _, g := range o.got {
				total += g
			}
			if total > c.budget {
				t.Errorf("%d tokens over a budget of %d", total, c.budget)
			}
			if !slices.Equal(deficit, c.deficitLeft) {
				t.Errorf("deficits after %v, want %v", deficit, c.deficitLeft)
			}
		})
	}
}

// counterPack is a pack oracle over counters: each tenant's calls are lists of datum
// lengths; a negative length is a call that fails when first asked (it leaves the queue).
type counterPack struct {
	calls [][][]int // tenant → call → datum lengths not yet planned
	order []string  // "t/c:len" as planned
}

// counterPackOracle answers for a counterPack (a type of its own: the oracle's method
// calls and the field calls would clash).
type counterPackOracle struct{ *counterPack }

func (o counterPackOracle) calls(t int) int { return len(o.counterPack.calls[t]) }

func (o counterPackOracle) next(t, c int) datum {
	call := o.counterPack.calls[t][c]
	if len(call) > 0 && call[0] < 0 {
		o.counterPack.calls[t] = slices.Delete(o.counterPack.calls[t], c, c+1)
		return datumGone
	}
	if len(call) == 0 {
		return datumNone
	}
	return datum(call[0])
}

func (o counterPackOracle) take(t, c int) {
	call := o.counterPack.calls[t][c]
	o.order = append(o.order, fmt.Sprintf("%c:%d", 'A'+t, call[0]))
	o.counterPack.calls[t][c] = call[1:]
}

// The training pack's policy lets a small tenant's datum into the first pack beside a
// flood, keeps the pack within its budget, runs an over-long datum alone, and steps over
// a call that fails.
func TestFillPackSharesTheBudget(t *testing.T) {
	for _, c := range []struct {
		name    string
		calls   [][][]int
		quantum int
		budget  int
		order   []string
		tokens  int
	}{
		{"a small tenant beside a flood", [][][]int{{{16, 16, 16, 16}, {16, 16, 16, 16}}, {{16}}}, 32, 64,
			[]string{"A:16", "A:16", "B:16", "A:16"}, 64},
		{"an over-long datum runs alone", [][][]int{{{100, 10}}}, 64, 64, []string{"A:100"}, 100},
		{"the pack stops at the budget", [][][]int{{{40, 40}}, {{40}}}, 64, 80, []string{"A:40", "B:40"}, 80},
		{"a failing call is stepped over", [][][]int{{{-1}, {8}}, {{8}}}, 16, 64, []string{"A:8", "B:8"}, 16},
		{"nothing queued", [][][]int{{}}, 16, 64, nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cp := &counterPack{}
			for _, tc := range c.calls {
				var calls [][]int
				for _, d := range tc {
					calls = append(calls, slices.Clone(d))
				}
				cp.calls = append(cp.calls, calls)
			}
			deficit := make([]int, len(c.calls))
			tokens := fillPack(deficit, c.quantum, c.budget, counterPackOracle{cp})
			if tokens != c.tokens || !slices.Equal(cp.order, c.order) {
				t.Fatalf("planned %v (%d tokens), want %v (%d)", cp.order, tokens, c.order, c.tokens)
			}
		})
	}
}
