//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"testing"

	"github.com/tuft-go/tuft/engine/device"
)

// A replay reads the inputs of its own step: the ids uploaded inside the step change
// every time, and each replay gathers the rows they name (a replay that used the
// capture's ids, or the previous step's, would gather those rows instead).
func TestGraphReplayReadsEachStepsInputs(t *testing.T) {
	d := openOrSkip(t, Options{Graphs: true, GraphLimit: 4})
	defer d.Close()
	const rows, dim = 16, 8
	vals := make([]float32, rows*dim)
	for i := range vals {
		vals[i] = float32(i)
	}
	table := d.Alloc(rows * dim)
	d.Upload(table, vals)
	for step := 0; step < 10; step++ {
		ids := []int32{int32(step % rows), int32((3 * step) % rows), int32((step + 7) % rows)}
		var out device.Tensor[float32]
		f := func(dv device.Device[float32]) {
			out = dv.Alloc(len(ids) * dim)
			dv.Embed(out, table, dv.Ints(ids), dim)
			dv.Scale(out, 2)
		}
		// The first step of a shape runs eagerly; the second captures, the rest replay.
		if ran := d.Graph("gather", f); ran != (step > 0) {
			t.Fatalf("step %d: Graph reported %v", step, ran)
		} else if !ran {
			f(d)
		}
		got := make([]float32, len(ids)*dim)
		d.Download(got, out)
		for i, id := range ids {
			for j := 0; j < dim; j++ {
				if want := 2 * vals[int(id)*dim+j]; got[i*dim+j] != want {
					t.Fatalf("step %d row %d (id %d) column %d: %v, want %v", step, i, id, j, got[i*dim+j], want)
				}
			}
		}
		d.Free(out) // the graph's: ignored
	}
	st := d.Stats()
	if st.GraphCaptures != 1 || st.GraphLaunches != 9 || st.GraphFallbacks != 0 || st.Graphs != 1 {
		t.Fatalf("stats %+v: want 1 capture, 9 launches, no fallback", st)
	}
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
}

// A kernel argument that changed since the capture (here a scale factor) would be
// replayed stale: Graph refuses instead, runs nothing, and drops the graph; the step
// then runs eagerly and the next one captures again.
func TestGraphRefusesAChangedArgument(t *testing.T) {
	d := openOrSkip(t, Options{Graphs: true, GraphLimit: 4})
	defer d.Close()
	x := d.Alloc(4)
	step := func(s float32) bool {
		d.Upload(x, []float32{1, 2, 3, 4})
		return d.Graph("scale", func(dv device.Device[float32]) { dv.Scale(x, s) })
	}
	got := make([]float32, 4)
	if step(2) {
		t.Fatal("the first use of a shape was captured")
	}
	if !step(2) {
		t.Fatal("capture failed")
	}
	if d.Download(got, x); got[3] != 8 {
		t.Fatalf("captured step: %v", got)
	}
	if step(3) {
		t.Fatal("a replay with a different scale was accepted")
	}
	if d.Download(got, x); got[3] != 4 {
		t.Fatalf("the refused replay changed x: %v", got)
	}
	if !step(3) { // captured again
		t.Fatal("second capture failed")
	}
	if d.Download(got, x); got[3] != 12 {
		t.Fatalf("recaptured step: %v", got)
	}
	// A step that downloads cannot be a graph: refused, nothing run.
	dl := func(dv device.Device[float32]) {
		dv.Scale(x, 5)
		dv.Download(got, x)
	}
	first := d.Graph("download", dl) // the shape's first use: not run
	if first || d.Graph("download", dl) {
		t.Fatal("a step with a download was captured")
	}
	if d.Download(got, x); got[3] != 12 {
		t.Fatalf("the refused capture ran: %v", got)
	}
	// Graphs off: always refused.
	off := openOrSkip(t, Options{})
	defer off.Close()
	if off.Graph("k", func(device.Device[float32]) { t.Fatal("ran with graphs off") }) {
		t.Fatal("graphs off, yet Graph ran")
	}
	if st := d.Stats(); st.GraphFallbacks != 2 || st.GraphCaptures != 2 {
		t.Fatalf("stats %+v: want 2 fallbacks and 2 captures", st)
	}
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
}

// Graphs beyond the limit are dropped, least recently used first, and their blocks given
// back.
func TestGraphLimitDropsLeastRecentlyUsed(t *testing.T) {
	d := openOrSkip(t, Options{Graphs: true, GraphLimit: 2})
	defer d.Close()
	x := d.Alloc(1 << 10)
	for i, k := range []string{"a", "b", "c", "d", "a", "b", "a", "c", "a", "d"} {
		if ran := d.Graph(k, func(dv device.Device[float32]) {
			y := dv.Alloc(1 << 10)
			dv.Add(y, x, x)
		}); ran != (i >= 4) {
			t.Fatalf("graph %s (%d): Graph reported %v", k, i, ran)
		}
	}
	st := d.Stats()
	if st.Graphs != 2 || st.GraphCaptures != 4 || st.GraphLaunches != 6 {
		t.Fatalf("stats %+v: want 2 graphs kept of 4 captured, 6 launches", st)
	}
	// "a" was used last but one: it is kept with "d"; a replay of it is not a capture.
	if !d.Graph("a", func(dv device.Device[float32]) { dv.Add(dv.Alloc(1<<10), x, x) }) || d.Stats().GraphCaptures != 4 {
		t.Fatalf("graph a was dropped: %+v", d.Stats())
	}
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
}

// A step that panics leaves the device eager and usable (the capture ended, the graph
// dropped).
func TestGraphStepThatPanicsLeavesTheDeviceEager(t *testing.T) {
	d := openOrSkip(t, Options{Graphs: true, GraphLimit: 4})
	defer d.Close()
	x := d.Alloc(4)
	d.Graph("p", nil) // the first use of a shape runs nothing (the caller runs it eagerly)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		d.Graph("p", func(dv device.Device[float32]) {
			dv.Scale(x, 2)
			panic("step")
		})
	}()
	d.Upload(x, []float32{1, 2, 3, 4})
	d.Scale(x, 3)
	got := make([]float32, 4)
	if d.Download(got, x); got[3] != 12 {
		t.Fatalf("after the panic: %v", got)
	}
	if err := d.Err(); err != nil || d.Stats().Graphs != 0 {
		t.Fatalf("after the panic: %v, %+v", err, d.Stats())
	}
}
