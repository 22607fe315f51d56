package engine

import (
	"fmt"

	"github.com/tuft-go/tuft/engine/device"
	"github.com/tuft-go/tuft/engine/kern"
)

// TextCodec turns text into token ids and back. engine/tokenizer implements it; the
// sampler uses Decode to match stop strings.
type TextCodec interface {
	Encode(text string) ([]int32, error)
	Decode(tokens []int32) string
}

// Device is what a Model computes on: the CPU (device.NewCPU) or a GPU (OpenDevice).
type Device = device.Device[float32]

// Model is a loaded base model: architecture, frozen weights (held once, shared by every
// adapter) and tokenizer. Its methods are safe for concurrent use on different adapters.
// W is the host float32 copy of the weights: nil when Load streamed them to a GPU
// (loadstream.go), and when the CPU keeps its matrices in a narrower weight format
// (engine.cpu_weight_format other than f32), which is then the only copy; a merged export
// reads the base weights from the model's file instead (engine/export).
type Model struct {
	Name         string // the name clients use as base_model
	Cfg          Config
	W            *Weights[float32]
	Tok          TextCodec // may be nil for weight-only tests
	ChatTemplate string    // Jinja chat template from tokenizer_config.json, "" if none
	// Dir is where the model was loaded from (a directory, or a .gguf file; "" when built
	// in memory): its tokenizer files travel with a merged export (engine/export).
	Dir string
	// TokenizerJSON is the tokenizer.json Tok was built from when it was not read from a
	// file (a GGUF file's vocabulary); nil otherwise.
	TokenizerJSON []byte

	dev  Device
	dw   *devWeights[float32] // W on dev
	rope *device.Rope
}

// Option configures NewModel and Load.
type Option func(*options)

type options struct {
	dev Device
	// native are matrices already in the device's storage, keyed by the first element
	// of the float32 copy they stand for (ggufnative.go).
	native map[*float32]*kern.Frozen
}

// OnDevice runs the model on d instead of the CPU.
func OnDevice(d Device) Option { return func(o *options) { o.dev = d } }

// NewModel checks that every weight has the shape cfg implies and builds a Model, placing
// the weights on the chosen device.
func NewModel(name string, cfg Config, w *Weights[float32], tok TextCodec, opts ...Option) (*Model, error) {
	o := options{}
	for _, f := range opts {
		f(&o)
	}
	if o.dev == nil {
		o.dev = device.NewCPU[float32]()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := w.check(cfg); err != nil {
		return nil, err
	}
	dw, err := uploadWeights(o.dev, cfg, w, o.native)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	if dw.narrowed() {
		w = nil // the device's copy is the model (norms and biases stay alive through it)
	}
	return &Model{Name: name, Cfg: cfg, W: w, Tok: tok, dev: o.dev, dw: dw, rope: newRope(cfg, cfg.MaxPositions)}, nil
}

// Device is the device the model computes on.
func (m *Model) Device() Device { return m.dev }
