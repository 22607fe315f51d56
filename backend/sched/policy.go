package sched

// This file is the scheduler's tenant policy: deficit round robin across tenants, for the
// tokens of a decode step and for the datums of a training pack. It decides only whose
// turn it is and how much a turn may take; whether a sequence gets memory, or a datum
// exists, it asks an allocation oracle (the KV manager in kv.go, the training queue in
// train.go), so its rules are tested without a pool or a model (policy_test.go).

// offer is an oracle's answer to the policy's offer of tokens to a tenant's candidate.
type offer struct {
	took  int  // tokens the candidate takes (0: none)
	stay  bool // it can take more this step: the tenant's turn stays on it
	block bool // the tenant's line waits (for memory, or the step has no sequence left)
}

// stepOracle answers for the sequences of a decode step being planned.
type stepOracle interface {
	// offer offers tenant t's candidate c (in the tenant's order) up to max tokens.
	offer(t, c, max int) offer
}

// fillStep shares a decode step's token budget between tenants by deficit round robin,
// one token per tenant per round (rows go round the tenants one at a time, so a full
// step is shared equally, max-min fair, however many sequences each tenant has).
// deficit holds each tenant's deficit and is updated (what a tenant could not use
// because the budget ran out carries to the next step); cands is the number of
// candidates of each tenant, start the tenant whose turn comes first. A tenant whose
// candidates are all served loses its deficit; one whose line blocks keeps it.
func fillStep(deficit []int, cands []int, start, budget int, o stepOracle) {
	n := len(deficit)
	if n == 0 {
		return
	}
	cur := make([]int, n)
	exhausted := make([]bool, n)
	const quantum = 1
	tokLeft := budget
	for tokLeft > 0 {
		progress := false
		for k := 0; k < n && tokLeft > 0; k++ {
			ti := (start + k) % n
			if exhausted[ti] {
				continue
			}
			deficit[ti] += quantum
			for deficit[ti] > 0 && tokLeft > 0 {
				if cur[ti] >= cands[ti] {
					exhausted[ti], deficit[ti] = true, 0
					break
				}
				a := o.offer(ti, cur[ti], min(deficit[ti], tokLeft))
				if a.block {
					exhausted[ti] = true
					break
				}
				if a.took == 0 {
					cur[ti]++
					continue
				}
				deficit[ti] -= a.took
				tokLeft -= a.took
				progress = true
				if !a.stay {
					cur[ti]++
				}
			}
		}
		if !progress {
			break
		}
	}
}

// datum is a training oracle's answer about a call's next datum.
type datum int

const (
	datumNone datum = -1 // the call has no datum left to plan: the tenant's next call
	datumGone datum = -2 // the call failed and left the tenant's queue (the next takes its place)
)

// packOracle answers for the training calls of a pack being built.
type packOracle interface {
	// calls is the number of tenant t's queued calls now.
	calls(t int) int
	// next is the tokens of call c's next unplanned datum, or datumNone / datumGone.
	next(t, c int) datum
	// take plans that datum into the pack.
	take(t, c int)
}

// fillPack shares a training pack's token budget between the tenants with training
// work by deficit round robin over datum tokens: each round adds quantum to every
// tenant's deficit (deficit, updated), and a tenant's calls go in order, whole datums at
// a time, while its deficit covers the next one and the pack has room. A datum longer
// than the budget runs alone (in an empty pack) once its tenant's deficit covers it.
// It returns the tokens planned.
func fillPack(deficit []int, quantum, budget int, o packOracle) int {
	n := len(deficit)
	cur := make([]int, n)
	exhausted := make([]bool, n)
	tokens := 0
	for {
		progress, open := false, false
		for i := 0; i < n; i++ {
			if exhausted[i] {
				continue
			}
			open = true
			deficit[i] += quantum
			for {
				if cur[i] >= o.calls(i) {
					exhausted[i], deficit[i] = true, 0
					break
				}
				L := o.next(i, cur[i])
				if L == datumGone {
					continue
				}
				if L == datumNone {
					cur[i]++
					continue
				}
				if int(L) > deficit[i] {
					break // more deficit next round
				}
				if tokens > 0 && tokens+int(L) > budget {
					exhausted[i] = true // the pack is full for it; its deficit waits for the next
					break
				}
				o.take(i, cur[i])
				tokens += int(L)
				deficit[i] -= int(L)
				progress = true
			}
		}
		if !open || (!progress && tokens > 0) {
			return tokens
		}
	}
}
