// Package device is the engine's compute layer: tensors that live on one device, and the
// operations that a transformer's forward and backward passes, its losses, its optimizer
// and its sampler are made of. The engine writes the model once over Device; CPU
// implements it with engine/kern (every operation generic over float32 and float64, the
// latter for finite-difference checks), and engine/cuda implements Device[float32] on an
// NVIDIA GPU.
//
// Conventions: matrices are dense and row-major; shapes are given explicitly and callers
// guarantee the tensors are long enough. Operations do not return errors: a device that
// can fail (a GPU) remembers its first error, turns later operations into no-ops, and
// reports it from Err, which the engine checks once per pass.
package device

import (
	"math"
	"unsafe"

	"github.com/tuft-go/tuft/engine/kern"
)

// Float is the element type of activations, gradients and optimizer state.
type Float = kern.Float

// Elem is any element type a Tensor holds: Float, or int32 for token ids, positions and
// block tables.
type Elem interface{ ~float32 | ~float64 | ~int32 }

// Tensor is a view of N elements on one device: host memory on a host device, a device
// address otherwise. A frozen weight may be stored narrower than its element type
// (bfloat16 on a GPU; a kern.Frozen matrix on the CPU); only the weight operand of
// MatMulNT/MatMulNN and the table of Embed accept such a tensor. Views are values:
// slicing one copies no data.
type Tensor[E Elem] struct {
	h    []E     // host memory (host devices)
	p    uintptr // device address (other devices)
	n    int
	bf16 bool
	fz   *kern.Frozen // a frozen matrix in host memory, in its own format
	// wide: products with this frozen weight keep the other operand in float32 even
	// where the weight's format would round it (see WideActivations).
	wide bool
	// tw: the device address of a bfloat16 copy of t's elements (see WithBF16); 0: none.
	tw uintptr
}

// WithBF16 is t (float32 activations on a device) with b, a bfloat16 tensor of the same
// length on the same device (BF16Operands.AllocBF16), attached as its bfloat16 operand:
// the operations of BF16Operands that write t also write t's values rounded to bfloat16
// into b, and a product of t with a bfloat16 weight reads b rather than rounding t in a
// separate launch. Host devices never see one (they have no BF16Operands).
func (t Tensor[E]) WithBF16(b Tensor[E]) Tensor[E] {
	if t.n == 0 && b.n == 0 {
		return t
	}
	if !b.bf16 || b.n != t.n || t.bf16 || t.p == 0 {
		panic("device: WithBF16 needs a float32 device tensor and a bfloat16 one of its length")
	}
	t.tw = b.p
	return t
}

// BF16Twin is the device address of the bfloat16 operand attached by WithBF16 (0: none).
func (t Tensor[E]) BF16Twin() uintptr { return t.tw }

// WideActivations is t as the weight operand of products that multiply float32
// activations whatever t's storage: the CPU rounds the activations of a forward product
// with bfloat16 weights to bfloat16 when sampling, as llama.cpp does, and not when
// training (kern.FrozenMatMulNTWide), as PyTorch does. Any other device ignores it.
func (t Tensor[E]) WideActivations() Tensor[E] {
	t.wide = true
	return t
}

// Host wraps host memory as a tensor of a host device.
func Host[E Elem](h []E) Tensor[E] { return Tensor[E]{h: h, n: len(h)} }

// OnDevice wraps n elements at device address p (stored as bfloat16 when bf16).
func OnDevice[E Elem](p uintptr, n int, bf16 bool) Tensor[E] {
	return Tensor[E]{p: p, n: n, bf16: bf16}
}

// FrozenMatrix wraps a frozen host matrix as a tensor of a host device.
func FrozenMatrix[E Elem](w *kern.Frozen) Tensor[E] {
	return Tensor[E]{fz: w, n: w.Rows * w.Cols}
}

// Frozen is the frozen host matrix t holds (nil for any other tensor).
func (t Tensor[E]) Frozen() *kern.Frozen { return t.fz }

// Len is the number of elements.
func (t Tensor[E]) Len() int { return t.n }

// Host is the host memory behind t (nil on other devices).
func (t Tensor[E]) Host() []E { return t.h }

// Ptr is the device address of t's first element (0 on host devices).
func (t Tensor[E]) Ptr() uintptr { return t.p }

// BF16 reports whether t is stored as bfloat16.
func (t Tensor[E]) BF16() bool { return t.bf16 }

// Empty reports whether t is the zero Tensor (no storage).
func (t Tensor[E]) Empty() bool { return t.h == nil && t.p == 0 && t.fz == nil }

// ElemSize is the bytes one stored element of t takes.
func (t Tensor[E]) ElemSize() uintptr {
	if t.bf16 {
		return 2
	}
	var e E
	return unsafe.Sizeof(e)
}

// Slice is the view of elements [i, j) of t.
func (t Tensor[E]) Slice(i, j int) Tensor[E] {
	if i < 0 || j < i || j > t.n {
		panic("device: slice bounds out of range")
	}
	if t.fz != nil {
		panic("device: slice of a frozen matrix")
	}
	if t.h != nil {
		return Tensor[E]{h: t.h[i:j:j], n: j - i}
	}
	s := Tensor[E]{p: t.p + uintptr(i)*t.ElemSize(), n: j - i, bf16: t.bf16}
	if t.tw != 0 {
		s.tw = t.tw + uintptr(i)*2
	}
	return s
}

// SharedOut is one product of MatMulNTShared: C[m×N] = A·Wᵀ, W [N×k] a weight (frozen or
// not; WideActivations as for MatMulNT).
type SharedOut[T Float] struct {
	C, W Tensor[T]
	N    int
}

// Device is the set of operations the engine runs on. T is the element type of
// activations and trainable state; frozen weights are Tensor[T] too, possibly narrowed.
type Device[T Float] interface {
	// Name says which device this is, for logs: "cpu", "cuda:0 (NVIDIA H100 …)".
	Name() string
	// HostMemory reports whether tensors are host slices (Tensor.Host is valid), so the
	// engine can wrap host data without copying it.
	HostMemory() bool
	// Err returns the first error since the last call, and clears it.
	Err() error

	// Alloc returns n zeroed elements; Free gives them back (host devices leave that to
	// the garbage collector).
	Alloc(n int) Tensor[T]
	Free(t Tensor[T])
	// AllocInts and FreeInts are Alloc and Free for int32 data.
	AllocInts(n int) Tensor[int32]
	FreeInts(t Tensor[int32])
	// Upload copies host data into dst; Download copies src to the host.
	Upload(dst Tensor[T], src []T)
	Download(dst []T, src Tensor[T])
	// Ints returns int32 host data on the device (a host device may alias src).
	Ints(src []int32) Tensor[int32]
	// Copy copies src into dst (same length) on the device.
	Copy(dst, src Tensor[T])
	// Weight places a frozen weight on the device, possibly narrowed (bfloat16 on a GPU);
	// a host device aliases src.
	Weight(src []T) Tensor[T]

	// MatMulNT computes C[m×n] (+)= A[m×k]·B[n×k]ᵀ: a Linear's forward pass, W = B.
	MatMulNT(c, a, b Tensor[T], m, n, k int, acc bool)
	// MatMulNTShared sets outs[i].C[m×N] = A[m×k]·outs[i].Wᵀ for products that share
	// their activation (a layer's Q, K and V; gate and up), bit for bit what MatMulNT
	// (acc false) gives for each alone: a device prepares A once (rounds it to bfloat16,
	// casts it) and may run the products as one job (the CPU: one hand-off to its cores
	// over the union of the outputs' rows).
	MatMulNTShared(a Tensor[T], outs []SharedOut[T], m, k int)
	// MatMulNN computes C[m×n] (+)= A[m×k]·B[k×n]: a Linear's input gradient dX = dY·W.
	MatMulNN(c, a, b Tensor[T], m, n, k int, acc bool)
	// MatMulTN computes C[m×n] (+)= A[k×m]ᵀ·B[k×n]: a weight gradient dW = dYᵀ·X.
	MatMulTN(c, a, b Tensor[T], m, n, k int, acc bool)

	// Add computes out = a + b elementwise (out may alias a or b).
	Add(out, a, b Tensor[T])
	// Scale computes x *= s.
	Scale(x Tensor[T], s T)
	// AddRows adds the row vector b[n] to each of the rows of y[rows×n].
	AddRows(y, b Tensor[T], rows int)
	// Embed copies rows idx[i] of table[·×d] into x[i] (an embedding lookup, or a row
	// gather when table is an activation).
	Embed(x, table Tensor[T], idx Tensor[int32], d int)
	// RMSNorm computes y = x·rstd·w per row with rstd = 1/√(mean(x²)+eps) (sums in
	// float64), and stores rstd per row for the backward pass.
	RMSNorm(y, rstd, x, w Tensor[T], rows, d int, eps float64)
	// AddRMSNorm computes sum = a + b, then y = RMSNorm(sum) and rstd as RMSNorm does, in
	// one pass over each row: a residual add and the norm that reads its result. sum may
	// alias a or b. The bits are those of Add then RMSNorm. (Its backward needs no fused
	// form: RMSNormBack already adds into the residual stream's gradient.)
	AddRMSNorm(sum, y, rstd, a, b, w Tensor[T], rows, d int, eps float64)
	// RMSNormBack adds to dx the gradient through RMSNorm (w frozen).
	RMSNormBack(dx, dy, x, w, rstd Tensor[T], rows, d int)
	// Rope rotates the heads of x[rows×heads·hd] in place by RoPE at each row's position
	// (HF rotate_half layout); inverse applies the transpose (the backward pass).
	Rope(x Tensor[T], pos Tensor[int32], heads int, r *Rope, inverse bool)
	// RopeQK is Rope over q (qHeads heads a row) and k (kHeads) at the same rows'
	// positions, in one launch on a GPU; the bits are those of the two Rope calls.
	RopeQK(q, k Tensor[T], pos Tensor[int32], qHeads, kHeads int, r *Rope, inverse bool)
	// RopeQKV is RopeQK (forward) followed by KVWrite of the rotated k and of v into the
	// caches kc and vc (row i to slot slots[i], width kHeads·head_dim): a cached pass's
	// three operations, in one launch on a GPU, with their bits.
	RopeQKV(q, k, v, kc, vc Tensor[T], pos, slots Tensor[int32], qHeads, kHeads int, r *Rope)
	// SwiGLU computes a = silu(g)·u.
	SwiGLU(a, g, u Tensor[T])
	// SwiGLUBack computes dg and du from da (overwriting them).
	SwiGLUBack(dg, du, da, g, u Tensor[T])
	// Attention computes causal softmax attention over a batch of sequences (one layer);
	// see Attn.
	Attention(a *Attn[T])
	// AttentionBack computes dq, dk and dv (overwriting them) from dout for an Attention
	// call that kept its probabilities and read contiguous keys. a.Out, when given (not
	// empty), is that call's output, which a device may read (Σ dO∘O = Σ P∘dP per row).
	AttentionBack(a *Attn[T], dq, dk, dv, dout Tensor[T])
	// KVWrite copies row i of rows[·×width] into slot slots[i] of cache[·×width].
	KVWrite(cache, rows Tensor[T], slots Tensor[int32], width int)
	// LogSoftmax replaces each row of x[rows×cols] by its log-softmax (sums in float64).
	LogSoftmax(x Tensor[T], rows, cols int)
	// Gather copies x[idx[i]] to dst[i] on the host.
	Gather(dst []T, x Tensor[T], idx []int64)
	// XentBack builds the gradient of a loss with respect to the logits from its gradient
	// with respect to target log-probabilities: for each listed row r it sets
	// dl[r,·] = −Σ·softmax(logp[r,·]) (Σ = Sums[i]), then adds Vals[j] at flat index
	// Idx[j]. Rows not listed are left as they are. On a host device dl may be logp
	// itself (each row is read before it is written).
	XentBack(dl, logp Tensor[T], cols int, g *XentGrad)
	// LossHead runs a training loss head (unembedding, log-softmax, the targets'
	// log-probabilities) in chunks of rows, so that the rows × V logits never exist; see
	// Head.
	LossHead(h *Head[T])
	// LossHeadBack sets dh[r] = Σⱼ gⱼ·W[tⱼ] − (Σⱼ gⱼ)·E[r] over row r's targets j: the
	// gradient of the loss with respect to the head's input, given g (len(Tok) values,
	// dL/dlogprob per target) and the E that LossHead left. dh is overwritten.
	LossHeadBack(h *Head[T], dh, g Tensor[T])
	// LossHeadLoraGrad adds to each of h.Lora's DB (those not empty) its B gradient
	// Σᵣ dL/dlogits[r]ᵀ·Z[r], recomputing the logits a chunk of rows at a time from
	// the LSE that LossHead left; g is as for LossHeadBack.
	LossHeadLoraGrad(h *Head[T], g Tensor[T])
	// SumSquares returns Σx² over all the tensors, accumulated in float64 in order.
	SumSquares(xs []Tensor[T]) float64
	// AdamW applies one AdamW step to w with gradient g and moments m, v, and zeroes g.
	AdamW(w, g, m, v Tensor[T], s *AdamStep)
	// Sample draws one token per Draw from rows of logits[·×cols] and returns the tokens
	// and their log-probabilities (see Draw for the semantics).
	Sample(logits Tensor[T], cols int, draws []Draw) ([]int32, []float32)
	// TopK returns, for each listed row of logp[·×cols], the k largest entries (ties: the
	// lower index first) as rows×k token ids and values.
	TopK(logp Tensor[T], cols int, rows []int32, k int) ([]int32, []T)

	// LoraOps are the grouped LoRA products of many adapters' runs of rows (lora.go).
	LoraOps[T]
}

// BF16Operands is a device whose products with bfloat16 weights multiply bfloat16
// activations (with float32 accumulation), and whose operations that produce such
// activations write them in bfloat16 directly: RMSNorm, AddRMSNorm and SwiGLU (y, a)
// and Attention (Out) in the forward pass. Their output may be a float32 tensor with a
// bfloat16 operand attached (Tensor.WithBF16: both are written), or a bfloat16 tensor
// alone, when no one needs the float32 values (only that bfloat16 operand is written).
// In the backward pass RMSNormBack (dx), SwiGLUBack (dg, du), RopeQK (q, k) and
// AttentionBack (dv) write the attached operand of the gradients that input-gradient
// products read; those stay float32 too. A product then reads the bfloat16 operand as
// it is, where a float32 activation would first be rounded in a separate launch; a
// bfloat16 activation with a float32 weight is refused. Any other operation refuses a
// bfloat16 activation.
type BF16Operands[T Float] interface {
	// AllocBF16 returns n elements stored as bfloat16, or the empty tensor where the
	// device's products do not take bfloat16 activations (float32 weights).
	AllocBF16(n int) Tensor[T]
}

// MatrixPlacer is a device that stores a frozen matrix in a format of its own, which it
// needs the matrix's shape for (row-wise blocks); the engine places matrices through it
// when the device has it, and through Weight otherwise.
type MatrixPlacer[T Float] interface {
	// WeightMatrix places the frozen [rows×cols] matrix src, as Weight does.
	WeightMatrix(src []T, rows, cols int) Tensor[T]
}

// Rope holds RoPE's cos and sin per position and frequency. Devices keep their own copy,
// made on first use; the tables must not change afterwards.
type Rope struct {
	Half      int       // head_dim / 2
	Positions int       // rows of the tables
	Cos, Sin  []float64 // [Positions][Half]
}

// NewRope computes the tables for inverse frequencies invFreq up to positions.
func NewRope(invFreq []float64, positions int) *Rope {
	half := len(invFreq)
	r := &Rope{Half: half, Positions: positions, Cos: make([]float64, positions*half), Sin: make([]float64, positions*half)}
	for p := 0; p < positions; p++ {
		for i, v := range invFreq {
			a := float64(p) * v
			r.Cos[p*half+i], r.Sin[p*half+i] = math.Cos(a), math.Sin(a)
		}
	}
	return r
}

// Attn describes one layer's attention over a batch of sequences. Query row Row+i of a
// sequence sits at position Pos+i and attends to that sequence's keys and values at
// positions 0…Pos+i. Keys live either contiguously (position j at row KRow+j of K and V:
// a training pass, where they are the rows' own) or in blocks of a KV pool (position j
// in block Tables[Table+j/BlockLen], slot j%BlockLen; K and V are the pool's tensors for
// this layer).
type Attn[T Float] struct {
	Q, Out  Tensor[T] // rows × Heads·HeadDim; Out is overwritten
	K, V    Tensor[T] // · × KVHeads·HeadDim
	Heads   int
	KVHeads int
	HeadDim int
	Scale   T // 1/√HeadDim
	Layout  *Layout
	// P, when not empty, receives what the backward pass needs: the softmax probabilities
	// (Layout.ProbLen elements; a sequence's Heads×N×(Pos+N) block starts at its POff),
	// or, with Stats, each query row's log-sum-exp of its scaled scores per head
	// (Layout.StatsLen elements, row r's head h at r·Heads+h), from which AttentionBack
	// recomputes the probabilities. Only a StatsKeeper takes Stats.
	P     Tensor[T]
	Stats bool
}

// StatsKeeper is implemented by devices whose Attention keeps per-row statistics
// instead of the probabilities (Attn.Stats): rows × heads values rather than a
// sequence's N×(Pos+N) per head, which at 2048 tokens is 4.5 GB over SmolLM2's 30 layers.
type StatsKeeper interface{ KeepsAttnStats() bool }

// KeepsStats reports whether d is a StatsKeeper that keeps statistics.
func KeepsStats(d any) bool {
	k, ok := d.(StatsKeeper)
	return ok && k.KeepsAttnStats()
}

// AttnSeq is one sequence of an Attn batch (see Attn).
type AttnSeq struct {
	Row, N, Pos int // query rows [Row, Row+N) at positions Pos…Pos+N−1
	KRow        int // contiguous keys: position j at row KRow+j (Blocks == 0)
	Table       int // paged keys: first entry of this sequence's block table
	Blocks      int // entries in its block table; 0: contiguous keys
	POff        int // offset of its probabilities in Attn.P
}

// Layout is the sequences of one pass, shared by every layer's Attn. Desc is Pack's
// data on the device, for devices that read it there.
type Layout struct {
	Seqs     []AttnSeq
	Tables   []int32 // block tables, concatenated
	BlockLen int
	Desc     Tensor[int32] // Pack() on the device
	Tab      Tensor[int32] // Tables on the device
}

// LayoutFields is the number of int32 values Pack writes per sequence.
const LayoutFields = 7

// Pack flattens the sequences to LayoutFields int32 values each, in AttnSeq's field
// order.
func (l *Layout) Pack() []int32 {
	out := make([]int32, 0, len(l.Seqs)*LayoutFields)
	for _, s := range l.Seqs {
		out = append(out, int32(s.Row), int32(s.N), int32(s.Pos), int32(s.KRow), int32(s.Table), int32(s.Blocks), int32(s.POff))
	}
	return out
}

// ProbLen is the number of probabilities a layout's sequences keep (the size of Attn.P).
func (l *Layout) ProbLen(heads int) int {
	n := 0
	for _, s := range l.Seqs {
		n += heads * s.N * (s.Pos + s.N)
	}
	return n
}

// StatsLen is the size of Attn.P with Stats: one value per head of every row the
// sequences occupy.
func (l *Layout) StatsLen(heads int) int {
	rows := 0
	for _, s := range l.Seqs {
		rows = max(rows, s.Row+s.N)
	}
	return rows * heads
}

// XentGrad lists what XentBack writes (see there).
type XentGrad struct {
	Rows []int32   // rows to fill
	Sums []float64 // Σ of dL/dlogprob over each row's targets
	Idx  []int64   // flat indices into dl
	Vals []float64 // dL/dlogprob added at Idx
}

// Head is one fused loss head (Device.LossHead) over Rows rows of final hidden states H:
// logits = H·Wᵀ, the log-softmax of each row, and each target's log-probability, computed
// a chunk of rows at a time. Its backward pass needs no logits either: with
// dL/dlogits[r] = Σⱼ gⱼ·onehot(tⱼ) − (Σⱼ gⱼ)·softmax(r), the input gradient
// dL/dH[r] = Σⱼ gⱼ·W[tⱼ] − (Σⱼ gⱼ)·E[r] with E[r] = softmax(r)·W, a D-vector per row that
// LossHead computes while the chunk's probabilities exist. That holds for any loss that
// reads only the targets' log-probabilities (every loss of engine/loss.go).
//
// A LoRA term on the unembedding adds Z·Bᵀ to the logits of its rows (Lora). Its input
// gradient dL/dZ = Σⱼ gⱼ·B[tⱼ] − (Σⱼ gⱼ)·F with F = softmax·B (kept by LossHead) is
// LossHeadBack's formula again; its B gradient Σᵣ dL/dlogits[r]ᵀ·Z[r] weighs every
// probability by the loss's gradient, known only after the forward pass, so
// LossHeadLoraGrad recomputes the logits for it, a chunk at a time.
type Head[T Float] struct {
	H, W       Tensor[T] // Rows × D hidden states; V × D unembedding (a frozen weight)
	Rows, D, V int
	// Off holds Rows+1 offsets into Tok: row r's targets are Tok[Off[r]:Off[r+1]].
	Off, Tok Tensor[int32]
	LogP     Tensor[T] // out: len(Tok) target log-probabilities
	E        Tensor[T] // out when not empty: Rows × D, softmax(r)·W (for LossHeadBack)
	LSE      Tensor[T] // out when not empty: Rows log-sum-exps (for LossHeadLoraGrad)
	Lora     []HeadLora[T]
}

// HeadLora is a LoRA term on the unembedding over rows [Start, Start+N) of a Head (runs
// do not overlap): logits += Z·Bᵀ.
type HeadLora[T Float] struct {
	Start, N, R int
	Z           Tensor[T] // N × R: the rows' scale·H·Aᵀ
	B           Tensor[T] // V × R
	F           Tensor[T] // out when not empty: N × R, softmax(r)·B
	DB          Tensor[T] // when not empty: V × R, LossHeadLoraGrad adds B's gradient
}

// Overlap is the rows [lo, hi) that the run shares with rows [r0, r0+n) (lo ≥ hi: none).
func (l *HeadLora[T]) Overlap(r0, n int) (lo, hi int) {
	return max(l.Start, r0), min(l.Start+l.N, r0+n)
}

// AdamStep is one AdamW update in torch.optim.AdamW's form, with the gradient clipping
// coefficient applied first:
//
//	g ← g·Clip; w ← w·Decay; m ← B1·m + (1−B1)·g; v ← B2·v + (1−B2)·g²
//	w ← w − StepSize·m / (√v/BC2Sqrt + Eps); g ← 0
type AdamStep struct {
	Clip, Decay, B1, B2, StepSize, BC2Sqrt, Eps float32
}

// AdamWFinite is a Device that applies AdamW to many tensors at once only where every
// result would be finite: the optimizer step then keeps no copy of the state to put back.
type AdamWFinite[T Float] interface {
	// AdamWIfFinite applies AdamW (as the Device's AdamW) to ws[i] with gs[i], ms[i],
	// vs[i] for every i and reports true, or, when some weight or moment would not be
	// finite, changes nothing (gradients included) and reports false.
	AdamWIfFinite(ws, gs, ms, vs []Tensor[T], s *AdamStep) bool
}

// Draw is one token to draw from row Row of a logits matrix. Logits are divided by
// Temperature, then top-k and then top-p truncate the distribution (HF's order), and a
// token is drawn with the uniform variate U from what remains; Temperature 0 means
// argmax (ties: the lowest id), and U is not used. The log-probability returned is the
// token's under the temperature-scaled distribution before truncation (at temperature 0,
// under the unscaled one). TopK ≤ 0 means no limit; TopP ≥ 1 no nucleus.
type Draw struct {
	Row         int
	Temperature float64
	TopK        int
	TopP        float64
	U           float64 // in [0, 1)
}
