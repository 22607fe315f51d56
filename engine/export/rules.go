package export

import (
	"fmt"
	"strings"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/gguf"
)

// Format is an export format.
type Format string

// The export formats.
const (
	PEFT     Format = "peft"      // adapter_config.json + adapter_model.safetensors
	HF       Format = "hf"        // the merged model in Hugging Face layout, bfloat16
	GGUF     Format = "gguf"      // the merged model as one GGUF file, with a Modelfile
	GGUFLoRA Format = "gguf-lora" // a GGUF LoRA adapter and its base model as GGUF, with a Modelfile
)

// Formats lists the formats, for usage and error messages.
var Formats = []Format{PEFT, HF, GGUF, GGUFLoRA}

// ParseFormat reads a format name; an unknown one is an InputError naming it.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", engine.Inputf("format %q is not an export format (%s)", s, formatList())
}

func formatList() string {
	var s []string
	for _, f := range Formats {
		s = append(s, string(f))
	}
	return strings.Join(s, ", ")
}

// Quants are the GGUF tensor types a model export may use (by their --quant names).
var Quants = map[string]gguf.TensorType{"f16": gguf.F16, "bf16": gguf.BF16, "q8_0": gguf.Q8_0}

// DefaultQuant is the GGUF type when none is asked for (llama.cpp's converter's default).
const DefaultQuant = "f16"

// ParseQuant reads a --quant name for format f ("" is DefaultQuant). Only the GGUF formats
// take one; an unknown name is an InputError naming it.
func ParseQuant(f Format, s string) (string, error) {
	if s == "" {
		return DefaultQuant, nil
	}
	if f != GGUF && f != GGUFLoRA {
		return "", engine.Inputf("quant %q: only the gguf and gguf-lora formats take a quant (%s writes %s)", s, f, nativePrecision[f])
	}
	if _, ok := Quants[s]; !ok {
		return "", engine.Inputf("quant %q is not supported (f16, bf16, q8_0)", s)
	}
	return s, nil
}

var nativePrecision = map[Format]string{PEFT: "float32 adapter weights", HF: "bfloat16"}

// A Rule says whether a format can carry the LoRA of one target module, and how.
type Rule struct {
	Module string // PEFT's target module name
	Format Format
	// Carry: the format holds this module's LoRA (as adapter tensors, or merged into
	// the weights when Merged).
	Carry  bool
	Merged bool
	// Why explains a refusal (Carry false).
	Why string
}

// adapterModules are the modules vLLM's LoRA loader (and llama.cpp's) apply an adapter to
// in Llama and Qwen2 models; an adapter format carries only these.
var adapterModules = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

const lmHeadWhy = "an lm_head LoRA is not loadable by vLLM (its LoRA loader adapts the attention and MLP projections only; " +
	"lm_head and embedding adapters are refused), and llama.cpp has no output tensor to adapt when the embeddings are tied; " +
	"export the merged model instead (--format hf or --format gguf), which folds the lm_head update into the weights"

// Rules is the table of what each format does with each module TuFT trains. Check
// applies it; its test and docs/export.md show it.
func Rules() []Rule {
	var out []Rule
	for _, f := range Formats {
		merged := f == HF || f == GGUF
		for _, m := range adapterModules {
			out = append(out, Rule{Module: m, Format: f, Carry: true, Merged: merged})
		}
		r := Rule{Module: "lm_head", Format: f, Carry: merged, Merged: merged}
		if !merged {
			r.Why = lmHeadWhy
		}
		out = append(out, r)
	}
	return out
}

// Modules lists the PEFT target modules of an adapter configuration.
func Modules(c engine.LoraConfig) []string {
	var mods []string
	if c.TrainAttn {
		mods = append(mods, adapterModules[:4]...)
	}
	if c.TrainMLP {
		mods = append(mods, adapterModules[4:]...)
	}
	if c.TrainUnembed {
		mods = append(mods, "lm_head")
	}
	return mods
}

// Check refuses, with an InputError giving the reason, an export of an adapter whose
// modules the format cannot carry.
func Check(f Format, mods []string) error {
	for _, m := range mods {
		found := false
		for _, r := range Rules() {
			if r.Format != f || r.Module != m {
				continue
			}
			found = true
			if !r.Carry {
				return engine.Inputf("cannot export as %s: the adapter trains %s: %s", f, m, r.Why)
			}
		}
		if !found {
			return engine.Inputf("cannot export as %s: target module %q is not one TuFT trains", f, m)
		}
	}
	return nil
}

// ggufFileType is general.file_type for a model written in type t (llama.cpp's
// LLAMA_FTYPE numbers).
func ggufFileType(t gguf.TensorType) uint32 {
	switch t {
	case gguf.F16:
		return 1
	case gguf.Q8_0:
		return 7
	case gguf.BF16:
		return 32
	}
	return 0
}

func quantType(q string) (gguf.TensorType, error) {
	t, ok := Quants[q]
	if !ok {
		return 0, fmt.Errorf("export: quant %q is not supported", q)
	}
	return t, nil
}
