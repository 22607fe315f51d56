package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// Proj names a LoRA target projection.
type Proj int

// The LoRA targets, in PEFT's module names.
const (
	ProjQ Proj = iota
	ProjK
	ProjV
	ProjO
	ProjGate
	ProjUp
	ProjDown
	NumLayerProj // number of per-layer targets
)

// ModuleName is the PEFT target module name of p.
func (p Proj) ModuleName() string {
	return [...]string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}[p]
}

// LoraPair is one LoRA update ΔW = scale·B·A of a Linear with weight [Out, In].
type LoraPair[T kern.Float] struct {
	In, Out int
	A       []T // [r, In]
	B       []T // [Out, r]
}

// LoraWeights are an adapter's trainable parameters (or their gradients, or optimizer
// moments, which have the same layout). A nil pair means the projection is not adapted.
//
// On the CPU the slices are what the engine computes with. On another device the engine
// computes with a copy it makes on first use; the slices are then brought up to date only
// by Model.AdapterToHost (SaveAdapter does it), and edits to them reach the device only
// through Model.AdapterFromHost.
type LoraWeights[T kern.Float] struct {
	Rank   int
	Scale  T // alpha / rank
	Layers [][NumLayerProj]*LoraPair[T]
	LMHead *LoraPair[T] // train_unembed

	dev *devLora[T] // the copy on a non-host device, made on first use
}

// Adapter is one LoRA adapter with its gradients and optimizer state. The caller runs one
// operation on an adapter at a time.
type Adapter struct {
	Config LoraConfig
	W      LoraWeights[float32] // parameters
	Grad   LoraWeights[float32] // accumulated gradients (zeroed by an optimizer step)
	// M, V are AdamW's moments; with Dimuon (Config.Optimizer) M is the momentum and V
	// stays zero.
	M, V LoraWeights[float32]
	Step int64 // optimizer steps taken
}

// projDims returns (in, out) of a layer projection.
func projDims(c Config, p Proj) (int, int) {
	D, I, q, kv := c.Hidden, c.Intermediate, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	switch p {
	case ProjQ:
		return D, q
	case ProjK, ProjV:
		return D, kv
	case ProjO:
		return q, D
	case ProjGate, ProjUp:
		return D, I
	}
	return I, D // down
}

// targets reports which projections an adapter config trains.
func targets(cfg LoraConfig) [NumLayerProj]bool {
	var t [NumLayerProj]bool
	for p := Proj(0); p < NumLayerProj; p++ {
		switch p {
		case ProjQ, ProjK, ProjV, ProjO:
			t[p] = cfg.TrainAttn
		default:
			t[p] = cfg.TrainMLP
		}
	}
	return t
}

// zeroLike allocates an adapter-shaped set of zero tensors.
func zeroLike(c Config, cfg LoraConfig) LoraWeights[float32] {
	lw := LoraWeights[float32]{Rank: cfg.Rank, Layers: make([][NumLayerProj]*LoraPair[float32], c.Layers)}
	t := targets(cfg)
	r := cfg.Rank
	for l := range lw.Layers {
		for p := Proj(0); p < NumLayerProj; p++ {
			if t[p] {
				in, out := projDims(c, p)
				lw.Layers[l][p] = &LoraPair[float32]{In: in, Out: out, A: make([]float32, r*in), B: make([]float32, out*r)}
			}
		}
	}
	if cfg.TrainUnembed {
		lw.LMHead = &LoraPair[float32]{In: c.Hidden, Out: c.VocabSize, A: make([]float32, r*c.Hidden), B: make([]float32, c.VocabSize*r)}
	}
	return lw
}

func zeroLoraLike[T kern.Float](lw *LoraWeights[T]) LoraWeights[T] {
	out := LoraWeights[T]{Rank: lw.Rank, Scale: lw.Scale, Layers: make([][NumLayerProj]*LoraPair[T], len(lw.Layers))}
	for l := range lw.Layers {
		for p := Proj(0); p < NumLayerProj; p++ {
			if q := lw.Layers[l][p]; q != nil {
				out.Layers[l][p] = &LoraPair[T]{In: q.In, Out: q.Out, A: make([]T, len(q.A)), B: make([]T, len(q.B))}
			}
		}
	}
	if q := lw.LMHead; q != nil {
		out.LMHead = &LoraPair[T]{In: q.In, Out: q.Out, A: make([]T, len(q.A)), B: make([]T, len(q.B))}
	}
	return out
}

func (lw *LoraWeights[T]) pairs() []*LoraPair[T] {
	var out []*LoraPair[T]
	for l := range lw.Layers {
		for p := Proj(0); p < NumLayerProj; p++ {
			if lw.Layers[l][p] != nil {
				out = append(out, lw.Layers[l][p])
			}
		}
	}
	if lw.LMHead != nil {
		out = append(out, lw.LMHead)
	}
	return out
}

// NewAdapter creates an adapter initialised as PEFT does: A Kaiming-uniform(a=√5), that is
// U(−1/√in, 1/√in), from a generator seeded by cfg.Seed; B zero.
func (m *Model) NewAdapter(cfg LoraConfig) (*Adapter, error) {
	if cfg.Rank < 1 {
		return nil, Inputf("lora rank %d must be at least 1", cfg.Rank)
	}
	if !cfg.TrainAttn && !cfg.TrainMLP && !cfg.TrainUnembed {
		return nil, Inputf("lora config trains nothing: set train_attn, train_mlp or train_unembed")
	}
	if err := cfg.Optimizer.Validate(); err != nil {
		return nil, err
	}
	cfg.Optimizer = cfg.Optimizer.Normalize()
	if cfg.Alpha == 0 {
		cfg.Alpha = float64(cfg.Rank)
	}
	a := &Adapter{Config: cfg, W: zeroLike(m.Cfg, cfg), Grad: zeroLike(m.Cfg, cfg), M: zeroLike(m.Cfg, cfg), V: zeroLike(m.Cfg, cfg)}
	a.W.Scale = float32(cfg.Alpha / float64(cfg.Rank))
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6c6f7261))
	for _, p := range a.W.pairs() {
		bound := 1 / math.Sqrt(float64(p.In))
		for i := range p.A {
			p.A[i] = float32((2*rng.Float64() - 1) * bound)
		}
	}
	return a, nil
}

// devPair is a LoraPair on a device.
type devPair[T kern.Float] struct {
	in, out, rank int
	a, b          device.Tensor[T]
}

// devLora is a LoraWeights on a device: views of its slices on a host device, a copy
// elsewhere. Per-pass gradient scratch is a devLora too.
type devLora[T kern.Float] struct {
	d      device.Device[T]
	scale  T
	layers [][NumLayerProj]*devPair[T]
	lm     *devPair[T]
	list   []*devPair[T] // every pair, in pairs() order
	owned  bool          // the tensors are device allocations to free
}

func (dl *devLora[T]) pair(pr proj) *devPair[T] {
	if dl == nil {
		return nil
	}
	if pr.lm {
		return dl.lm
	}
	if dl.layers == nil {
		return nil
	}
	return dl.layers[pr.l][pr.p]
}

// tensors lists A and B of every pair, in pairs() order.
func (dl *devLora[T]) tensors() []device.Tensor[T] {
	out := make([]device.Tensor[T], 0, 2*len(dl.list))
	for _, p := range dl.list {
		out = append(out, p.a, p.b)
	}
	return out
}

// newDevLora builds a devLora shaped like lw whose tensors mk makes.
func newDevLora[T kern.Float](d device.Device[T], lw *LoraWeights[T], owned bool, mk func(q *LoraPair[T]) (a, b device.Tensor[T])) *devLora[T] {
	dl := &devLora[T]{d: d, scale: lw.Scale, owned: owned, layers: make([][NumLayerProj]*devPair[T], len(lw.Layers))}
	add := func(q *LoraPair[T]) *devPair[T] {
		a, b := mk(q)
		p := &devPair[T]{in: q.In, out: q.Out, rank: len(q.A) / q.In, a: a, b: b}
		dl.list = append(dl.list, p)
		return p
	}
	for l := range lw.Layers {
		for p := Proj(0); p < NumLayerProj; p++ {
			if q := lw.Layers[l][p]; q != nil {
				dl.layers[l][p] = add(q)
			}
		}
	}
	if lw.LMHead != nil {
		dl.lm = add(lw.LMHead)
	}
	return dl
}

// loraOn returns lw's tensors on d: views of its slices on a host device; elsewhere the
// copy made (from the slices) on first use, freed when lw is garbage collected.
func loraOn[T kern.Float](d device.Device[T], lw *LoraWeights[T]) *devLora[T] {
	if lw == nil {
		return nil
	}
	if d.HostMemory() {
		return newDevLora(d, lw, false, func(q *LoraPair[T]) (device.Tensor[T], device.Tensor[T]) {
			return device.Host(q.A), device.Host(q.B)
		})
	}
	if lw.dev != nil && lw.dev.d == d {
		lw.dev.scale = lw.Scale
		return lw.dev
	}
	if lw.dev != nil {
		lw.dev.free()
	}
	dl := newDevLora(d, lw, true, func(q *LoraPair[T]) (device.Tensor[T], device.Tensor[T]) {
		a, b := d.Alloc(len(q.A)), d.Alloc(len(q.B))
		d.Upload(a, q.A)
		d.Upload(b, q.B)
		return a, b
	})
	lw.dev = dl
	runtime.AddCleanup(lw, func(dl *devLora[T]) { dl.free() }, dl)
	return dl
}

// zeroOn allocates zero gradient scratch shaped like lw on d.
func zeroOn[T kern.Float](d device.Device[T], lw *devLora[T]) *devLora[T] {
	dl := &devLora[T]{d: d, scale: lw.scale, owned: true, layers: make([][NumLayerProj]*devPair[T], len(lw.layers))}
	cp := func(q *devPair[T]) *devPair[T] {
		p := &devPair[T]{in: q.in, out: q.out, rank: q.rank, a: d.Alloc(q.a.Len()), b: d.Alloc(q.b.Len())}
		dl.list = append(dl.list, p)
		return p
	}
	for l := range lw.layers {
		for p := Proj(0); p < NumLayerProj; p++ {
			if q := lw.layers[l][p]; q != nil {
				dl.layers[l][p] = cp(q)
			}
		}
	}
	if lw.lm != nil {
		dl.lm = cp(lw.lm)
	}
	return dl
}

// free gives an owned copy's memory back to its device.
func (dl *devLora[T]) free() {
	if dl == nil || !dl.owned {
		return
	}
	for _, p := range dl.list {
		dl.d.Free(p.a)
		dl.d.Free(p.b)
	}
	dl.list, dl.layers, dl.lm = nil, nil, nil
}

// adapterWeights lists an adapter's four LoraWeights.
func adapterWeights(a *Adapter) []*LoraWeights[float32] {
	return []*LoraWeights[float32]{&a.W, &a.Grad, &a.M, &a.V}
}

// AdapterToHost copies an adapter's parameters, gradients and moments from the model's
// device into its LoraWeights slices (a no-op on the CPU, where they are the same memory).
func (m *Model) AdapterToHost(a *Adapter) error {
	if m.dev.HostMemory() {
		return nil
	}
	for _, lw := range adapterWeights(a) {
		dl := lw.dev
		if dl == nil || dl.d != m.dev {
			continue // never used on the device: the slices are current
		}
		for i, q := range lw.pairs() {
			m.dev.Download(q.A, dl.list[i].a)
			m.dev.Download(q.B, dl.list[i].b)
		}
	}
	if err := m.dev.Err(); err != nil {
		return fmt.Errorf("copy adapter from %s: %w", m.dev.Name(), err)
	}
	return nil
}

// AdapterFromHost copies an adapter's LoraWeights slices to the model's device, after the
// caller edited them (a no-op on the CPU).
func (m *Model) AdapterFromHost(a *Adapter) error {
	if m.dev.HostMemory() {
		return nil
	}
	for _, lw := range adapterWeights(a) {
		dl := loraOn(m.dev, lw)
		for i, q := range lw.pairs() {
			m.dev.Upload(dl.list[i].a, q.A)
			m.dev.Upload(dl.list[i].b, q.B)
		}
	}
	if err := m.dev.Err(); err != nil {
		return fmt.Errorf("copy adapter to %s: %w", m.dev.Name(), err)
	}
	return nil
}

// ReleaseAdapter frees the adapter's memory on the model's device now instead of when
// the adapter is garbage collected (a no-op on the CPU). The adapter stays usable: its
// host slices are brought up to date first, and a later operation copies them back.
func (m *Model) ReleaseAdapter(a *Adapter) error {
	if m.dev.HostMemory() {
		return nil
	}
	if err := m.AdapterToHost(a); err != nil {
		return err
	}
	for _, lw := range adapterWeights(a) {
		lw.dev.free()
		lw.dev = nil
	}
	return nil
}
