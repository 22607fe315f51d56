package bench

import "testing"

// TestControlPlaneMixRuns runs the control-plane benchmark's body once on a small mix
// (as -benchtime=1x would, with steps enough for every kind), so the benchmark cannot rot
// while nothing runs it: every operation kind must be recorded, and with no error.
func TestControlPlaneMixRuns(t *testing.T) {
	m := mix{tenants: 2, sessions: 1, steps: 4, store: "embedded"}
	by, wall := runMix(t, m)
	if t.Failed() {
		return
	}
	for _, k := range opKinds {
		if len(by[k]) == 0 {
			t.Errorf("no %s recorded", k)
		}
	}
	// Each session's steps: one forward_backward, optim_step, sample and list_runs each.
	for _, k := range []string{"forward_backward", "optim_step", "sample", "list_runs"} {
		if got, want := len(by[k]), m.tenants*m.sessions*m.steps; got != want {
			t.Errorf("%s: %d recorded, want %d", k, got, want)
		}
	}
	if wall <= 0 {
		t.Errorf("wall time %v", wall)
	}
}
