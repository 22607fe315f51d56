//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/tuft-go/tuft/engine/device"
)

// CUDA graphs of decode steps. A decode step of a given shape (engine/sampler.go's key:
// rows, adapters, rows with logits) launches the same kernels with the same arguments
// every time; only values in device memory change (token ids, positions, KV slots, block
// tables, the attention layout). Graph captures the step's operations once
// (cuStreamBeginCapture … cuStreamEndCapture, cuGraphInstantiate) and afterwards
// replays them with one cuGraphLaunch.
//
// What keeps a replay correct:
//   - every buffer the step allocates is the graph's own, the same block on every
//     replay (handed out in the order of the capture; a Free of one is ignored until
//     the graph is dropped);
//   - every small upload of the step (Ints, the LoRA run tables) goes to a fixed device
//     block of the graph's input arena; on a replay the new values are written to the
//     graph's page-locked copy of the arena and copied in one cuMemcpyHtoDAsync on the
//     copy stream before the launch (the copy waits for the compute stream's earlier
//     work, the launch for the copy);
//   - the step's host code still runs on a replay, but its operations only record: each
//     one (kernel and its grid and arguments, product, memset, allocation size, upload
//     size) is compared with the capture's. A kernel argument that differs (a scalar, a
//     pointer: an adapter's weights, a larger cast buffer) means the graph would replay
//     a stale value: the graph is dropped and Graph reports false, and the caller runs
//     the step eagerly (nothing of it has run). The next step captures again.

// graphArena is the bytes of each graph's input arena: a decode step's inputs are a few
// ints per row plus the block tables and the LoRA run tables; larger inputs get blocks of
// their own (and a copy each).
const graphArena = 64 << 10

type graphMode int

const (
	eager graphMode = iota
	capturing
	replaying
)

// Operation tags of a graph's record.
const (
	opLaunch uint64 = iota + 1
	opGemm
	opMemset
	opCopy
	opAlloc
	opInput
)

// graphInput is one upload of the step: its block, and its bytes in the host copy.
type graphInput struct {
	dst      uintptr
	off, len int
}

type graph struct {
	key        string
	exec, g    uintptr
	rec        []uint64 // the capture's operations, tagged
	bufs       []uintptr
	inputs     []graphInput
	arena      uintptr // device
	arenaUsed  int
	host       []byte // the inputs' bytes; page-locked once instantiated (stage)
	stage      []byte
	ev         uintptr // recorded after the inputs' copy
	used       uint64  // graphTick of the last use (least recently used goes first)
	pos, bi, n int     // replay cursors: record, bufs, inputs
	bad        string  // why the capture or replay cannot be used
}

var _ device.Grapher[float32] = (*Device)(nil)

// Graph implements device.Grapher: it runs f's operations (those of one decode step) as
// the graph recorded for key, capturing it when there is none and key was asked for
// before (a first use runs eagerly: reported false). It reports false,
// with nothing of f run, when graphs are off (Options.Graphs, or after the driver refused
// a capture: GraphError), when f did something a graph cannot hold
// (a download, a synchronisation, an upload into a given tensor, a first use of RoPE
// tables), or when f's operations differ from the capture's; the caller then runs the
// step eagerly. f must use the device it is given, and only during the call.
func (d *Device) Graph(key string, f func(device.Device[float32])) bool {
	d.mu.Lock()
	runtime.LockOSThread()
	defer func() {
		runtime.UnlockOSThread()
		d.mu.Unlock()
	}()
	if !d.graphsOn || d.err != nil || !d.fail(d.drv.check("cuCtxSetCurrent", call(d.drv.cuCtxSetCurrent, d.ctx))) {
		return false
	}
	d.graphTick++
	g := d.graphs[key]
	if g == nil && d.seen[key] == 0 {
		// A shape seen for the first time runs eagerly: in continuous batching many shapes
		// last a step or two (a sequence joins or ends, the adapters' mix changes), and a
		// capture costs more than the step. The second step of a shape captures it.
		d.seen[key] = d.graphTick
		if len(d.seen) > 4*max(1, d.graphMax) {
			clear(d.seen)
		}
		return false
	}
	if g == nil {
		g = &graph{key: key}
		if !d.beginCapture(g) {
			d.gstats.GraphFallbacks++
			d.graphErr, d.err, d.graphsOn = d.err, nil, false // as a refused capture, below
			return false
		}
		d.gmode = capturing
	} else {
		// The previous replay's copy read the page-locked inputs: it must have run before
		// they are written again.
		if !d.fail(d.drv.check("cuEventSynchronize", call(d.drv.cuEventSynchronize, g.ev))) {
			return false
		}
		g.pos, g.bi, g.n, g.bad = 0, 0, 0, ""
		d.gmode = replaying
	}
	d.cur = g
	view := &Device{core: d.core, graphView: true}
	d.view.Store(view)
	d.runStep(g, f, view)
	d.view.Store(nil)
	mode := d.gmode
	d.gmode, d.cur = eager, nil
	if mode == capturing {
		if !d.endCapture(g) {
			d.freeGraph(g)
			d.gstats.GraphFallbacks++
			if d.err != nil {
				// The driver refused the capture (nothing of it ran): the device goes on
				// without graphs rather than failing every later operation.
				d.graphErr, d.err, d.graphsOn = d.err, nil, false
			}
			return false
		}
		d.gstats.GraphCaptures++
		g.used = d.graphTick
		d.graphs[key] = g
		d.evictGraphs()
	} else if g.bad == "" && (g.pos != len(g.rec) || g.n != len(g.inputs)) {
		g.bad = "fewer operations than captured"
	}
	if g.bad != "" || d.err != nil {
		d.dropGraph(g)
		d.gstats.GraphFallbacks++
		return false
	}
	g.used = d.graphTick
	d.gstats.GraphLaunches++
	return d.launchGraph(g)
}

// GraphsEnabled implements device.Grapher: Options.Graphs, until the driver refuses a
// capture.
func (d *Device) GraphsEnabled() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.graphsOn
}

// GraphError is why the driver refused a capture, which turned graphs off (nil: none).
func (d *Device) GraphError() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.graphErr
}

// runStep runs f on the view; if f panics, the capture is ended and the graph dropped
// before the panic goes on, so the device is left eager.
func (d *Device) runStep(g *graph, f func(device.Device[float32]), view *Device) {
	defer func() {
		if r := recover(); r != nil {
			d.view.Store(nil)
			if d.gmode == capturing {
				out := newOut()
				call(d.drv.cuStreamEndCapture, d.cs, out.at(0))
				out.keep()
				g.g = out.uptr(0)
				d.freeGraph(g)
			} else {
				d.dropGraph(g)
			}
			d.gmode, d.cur = eager, nil
			panic(r)
		}
	}()
	f(view)
}

// beginCapture allocates g's input arena and starts capturing the compute stream.
func (d *Device) beginCapture(g *graph) bool {
	p, err := d.mem.get(graphArena)
	if !d.fail(err) {
		return false
	}
	g.arena = p
	d.owned[p] = true
	const relaxed = 2 // CU_STREAM_CAPTURE_MODE_RELAXED: the allocator may cuMemAlloc meanwhile
	if !d.fail(d.drv.check("cuStreamBeginCapture", call(d.drv.cuStreamBeginCapture, d.cs, relaxed))) {
		d.freeGraph(g)
		return false
	}
	return true
}

// endCapture ends the capture and instantiates it; false when the capture cannot be
// used (g.bad says why, or the driver refused).
func (d *Device) endCapture(g *graph) bool {
	out := newOut()
	r := call(d.drv.cuStreamEndCapture, d.cs, out.at(0))
	out.keep()
	g.g = out.uptr(0)
	if g.bad != "" || d.err != nil {
		return false
	}
	if !d.fail(d.drv.check("cuStreamEndCapture", r)) {
		return false
	}
	r = call(d.drv.cuGraphInstantiate, out.reset().at(0), g.g, 0)
	out.keep()
	if !d.fail(d.drv.check("cuGraphInstantiate", r)) {
		return false
	}
	g.exec = out.uptr(0)
	r = call(d.drv.cuEventCreate, out.reset().at(0), 2)
	out.keep()
	if !d.fail(d.drv.check("cuEventCreate", r)) {
		return false
	}
	g.ev = out.uptr(0)
	r = call(d.drv.cuMemAllocHost, out.reset().at(0), uintptr(max(1, len(g.host))))
	out.keep()
	if !d.fail(d.drv.check("cuMemAllocHost", r)) {
		return false
	}
	g.stage = unsafe.Slice((*byte)(cptr(out.uptr(0))), max(1, len(g.host)))
	copy(g.stage, g.host)
	g.host = nil
	return true
}

// launchGraph copies g's inputs on the copy stream and launches g on the compute stream
// after them.
func (d *Device) launchGraph(g *graph) bool {
	if !d.copyAfterCompute() {
		return false
	}
	copyIn := func(dst uintptr, off, n int) bool {
		r := call(d.drv.cuMemcpyHtoDAsync, dst, uintptr(unsafe.Pointer(&g.stage[off])), uintptr(n), d.xs)
		return d.fail(d.drv.check("cuMemcpyHtoDAsync", r))
	}
	if g.arenaUsed > 0 && !copyIn(g.arena, 0, g.arenaUsed) {
		return false
	}
	for _, in := range g.inputs {
		if in.dst < g.arena || in.dst >= g.arena+graphArena {
			if !copyIn(in.dst, in.off, in.len) {
				return false
			}
		}
	}
	if !d.fail(d.drv.check("cuEventRecord", call(d.drv.cuEventRecord, g.ev, d.xs))) || !d.computeAfterCopy() {
		return false
	}
	return d.fail(d.drv.check("cuGraphLaunch", call(d.drv.cuGraphLaunch, g.exec, d.cs)))
}

// graphBad marks the graph being captured or replayed as unusable.
func (d *Device) graphBad(why string) {
	if d.cur != nil && d.cur.bad == "" {
		d.cur.bad = why
	}
}

// record is every operation's entry: eagerly it issues the operation; while capturing it
// records it and issues it (into the graph); while replaying it compares it with the
// capture's next operation and issues nothing.
func (d *Device) record(op ...uint64) bool {
	switch d.gmode {
	case capturing:
		d.cur.rec = append(d.cur.rec, uint64(len(op)))
		d.cur.rec = append(d.cur.rec, op...)
		return true
	case replaying:
		g := d.cur
		if g.bad == "" {
			if g.pos+1+len(op) > len(g.rec) || g.rec[g.pos] != uint64(len(op)) {
				g.bad = fmt.Sprintf("operation %d is not the capture's", g.pos)
				return false
			}
			for i, v := range op {
				if g.rec[g.pos+1+i] != v {
					g.bad = fmt.Sprintf("operation at %d (tag %d) differs from the capture in field %d", g.pos, op[0], i)
					return false
				}
			}
			g.pos += 1 + len(op)
		}
		return false
	}
	return true
}

// recordLaunch is record for a kernel launch.
func (d *Device) recordLaunch(fn uintptr, gx, gy, bx int, args []uint64) bool {
	op := make([]uint64, 0, 5+len(args))
	op = append(op, opLaunch, uint64(fn), uint64(gx), uint64(gy), uint64(bx))
	return d.record(append(op, args...)...)
}

// graphGet is get while capturing (a new block the graph owns) or replaying (the
// capture's block).
func (d *Device) graphGet(bytes uintptr, zero bool) uintptr {
	z := uint64(0)
	if zero {
		z = 1
	}
	g := d.cur
	if d.gmode == replaying {
		if !d.record(opAlloc, uint64(bytes), z) && g.bad != "" {
			return 0
		}
		p := g.bufs[g.bi]
		g.bi++
		return p
	}
	d.record(opAlloc, uint64(bytes), z)
	p, err := d.mem.get(bytes)
	if !d.fail(err) {
		return 0
	}
	g.bufs = append(g.bufs, p)
	d.owned[p] = true
	if zero {
		d.fail(d.drv.check("cuMemsetD8Async", call(d.drv.cuMemsetD8Async, p, 0, bytes, d.cs)))
	}
	return p
}

// graphInput is upload while capturing (a block of the arena, its bytes kept for the
// host copy) or replaying (the new bytes written to the host copy).
func (d *Device) graphInput(src unsafe.Pointer, bytes uintptr) uintptr {
	g := d.cur
	bs := unsafe.Slice((*byte)(src), bytes)
	if d.gmode == replaying {
		if !d.record(opInput, uint64(bytes)) && g.bad != "" {
			return 0
		}
		in := g.inputs[g.n]
		g.n++
		copy(g.stage[in.off:in.off+in.len], bs)
		return in.dst
	}
	d.record(opInput, uint64(bytes))
	n := (int(bytes) + pinAlign - 1) / pinAlign * pinAlign
	in := graphInput{off: len(g.host), len: int(bytes)}
	if g.arenaUsed+n <= graphArena {
		in.dst, in.off = g.arena+uintptr(g.arenaUsed), g.arenaUsed
		d.owned[in.dst] = true // a Free of it is ignored
		g.arenaUsed += n
		if len(g.host) < g.arenaUsed {
			g.host = append(g.host, make([]byte, g.arenaUsed-len(g.host))...)
		}
	} else {
		p, err := d.mem.get(bytes)
		if !d.fail(err) {
			return 0
		}
		d.owned[p] = true
		in.dst, in.off = p, max(len(g.host), graphArena)
		g.host = append(g.host, make([]byte, in.off+n-len(g.host))...)
	}
	copy(g.host[in.off:], bs)
	g.inputs = append(g.inputs, in)
	return in.dst
}

// evictGraphs drops the least recently used graphs beyond the limit.
func (d *Device) evictGraphs() {
	for len(d.graphs) > max(1, d.graphMax) {
		var old *graph
		for _, g := range d.graphs {
			if old == nil || g.used < old.used {
				old = g
			}
		}
		d.dropGraph(old)
	}
}

// dropGraph forgets g and frees what it holds.
func (d *Device) dropGraph(g *graph) {
	if d.graphs[g.key] == g {
		delete(d.graphs, g.key)
	}
	d.freeGraph(g)
}

// freeGraph frees g's blocks (a launch still queued on the compute stream runs before
// any later use of them), its graph and its page-locked inputs.
func (d *Device) freeGraph(g *graph) {
	for _, in := range g.inputs {
		delete(d.owned, in.dst)
		if in.dst < g.arena || in.dst >= g.arena+graphArena {
			d.put(in.dst)
		}
	}
	for _, p := range append(g.bufs, g.arena) {
		if p != 0 {
			delete(d.owned, p)
			d.put(p)
		}
	}
	g.bufs, g.inputs, g.arena = nil, nil, 0
	if g.exec != 0 {
		call(d.drv.cuGraphExecDestroy, g.exec)
	}
	if g.g != 0 {
		call(d.drv.cuGraphDestroy, g.g)
	}
	g.exec, g.g = 0, 0
	if g.stage != nil {
		call(d.drv.cuStreamSynchronize, d.xs) // its last copy may be queued
		call(d.drv.cuMemFreeHost, uintptr(unsafe.Pointer(&g.stage[0])))
		g.stage = nil
	}
	if g.ev != 0 {
		call(d.drv.cuEventDestroy, g.ev)
		g.ev = 0
	}
}

// dropGraphs drops every graph (Close).
func (d *Device) dropGraphs() {
	for _, g := range d.graphs {
		d.dropGraph(g)
	}
}
