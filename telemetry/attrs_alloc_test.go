package telemetry

import "testing"

func TestAttrsLookupDoesNotAllocate(t *testing.T) {
	Attrs(MAttrOperationType, "optim_step")
	if n := testing.AllocsPerRun(100, func() { Attrs(MAttrOperationType, "optim_step") }); n != 0 {
		t.Fatalf("%v allocations per cached lookup", n)
	}
}
