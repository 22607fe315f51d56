package export

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/gguf"
	"github.com/tuft-go/tuft/engine/safetensors"
)

// Options say what to export.
type Options struct {
	Format Format
	// Quant is the GGUF tensor type of a gguf or gguf-lora export's model (f16, bf16,
	// q8_0; "" is DefaultQuant).
	Quant string
	// Model is the base model; a peft export does not need it (nil).
	Model *engine.Model
	// Base is the base model's directory (or .gguf file): its tokenizer files and
	// metadata travel with a merged export.
	Base string
	// Adapter is the checkpoint directory: a PEFT adapter as TuFT saves it.
	Adapter string
	// TokenizerJSON is the base's tokenizer.json when Base has none on disk (a GGUF
	// file's vocabulary, as the engine rebuilt it): an hf export writes it.
	TokenizerJSON []byte
}

// NeedsModel reports whether format f needs the base model's weights.
func NeedsModel(f Format) bool { return f != PEFT }

// Files written by each format (besides the tokenizer files of an hf export).
const (
	ModelfileName   = "Modelfile"
	LoRAGGUFName    = "adapter.gguf"
	HFWeightsName   = "model.safetensors"
	ggufModelPrefix = "model-"
)

// ModelGGUFName is the merged model's file name in a gguf export (base-<quant>.gguf in a
// gguf-lora export, where the model is the unmerged base).
func ModelGGUFName(f Format, quant string) string {
	if f == GGUFLoRA {
		return "base-" + quant + ".gguf"
	}
	return ggufModelPrefix + quant + ".gguf"
}

// Write exports into dir, which must be absent or empty, and returns the names of the
// files written. A refusal (a module the format cannot carry, an unknown format or
// quant) is an InputError, returned before anything is written.
func Write(o Options, dir string) ([]string, error) {
	if _, err := ParseFormat(string(o.Format)); err != nil {
		return nil, err
	}
	quant, err := ParseQuant(o.Format, o.Quant)
	if err != nil {
		return nil, err
	}
	mods, err := checkpointModules(o.Adapter)
	if err != nil {
		return nil, err
	}
	if err := Check(o.Format, mods); err != nil {
		return nil, err
	}
	if NeedsModel(o.Format) && o.Model == nil {
		return nil, fmt.Errorf("export %s: the base model is needed", o.Format)
	}
	if NeedsModel(o.Format) && o.Model.W == nil {
		// The model keeps no host float32 copy (a GPU, or a narrow CPU weight format):
		// the file's own values, read again, are what a merged model is made of.
		if o.Base == "" {
			return nil, fmt.Errorf("export %s: model %s keeps no float32 copy of its weights and names no file to read them from", o.Format, o.Model.Name)
		}
		base, err := engine.Load(o.Base, o.Model.Name)
		if err != nil {
			return nil, fmt.Errorf("export %s: reading the base weights: %w", o.Format, err)
		}
		o.Model = base
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return nil, engine.Inputf("export: %s is not empty", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	if o.Format == PEFT {
		return writePEFT(o.Adapter, dir)
	}
	a, err := loadAdapter(o.Model, o.Adapter)
	if err != nil {
		return nil, err
	}
	g := merger{m: o.Model, a: a}
	switch o.Format {
	case HF:
		return writeHF(g, o.Base, o.TokenizerJSON, dir)
	case GGUF:
		t, _ := quantType(quant)
		name := ModelGGUFName(GGUF, quant)
		w, err := modelWriter(g, o.Base, o.Model.Name+" (merged LoRA)", t)
		if err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(dir, name), w); err != nil {
			return nil, err
		}
		return []string{name, ModelfileName}, writeModelfile(dir, name, "", o.Model, w)
	}
	// gguf-lora: the adapter, and the unmerged base it applies to.
	t, _ := quantType(quant)
	lw, err := loraWriter(o.Model, a, o.Model.Name+" LoRA")
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, LoRAGGUFName), lw); err != nil {
		return nil, err
	}
	name := ModelGGUFName(GGUFLoRA, quant)
	bw, err := modelWriter(merger{m: o.Model}, o.Base, o.Model.Name, t)
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, name), bw); err != nil {
		return nil, err
	}
	return []string{LoRAGGUFName, name, ModelfileName}, writeModelfile(dir, name, LoRAGGUFName, o.Model, bw)
}

// writeFile writes w to path through a temporary file, so a failed export leaves no
// file that looks whole.
func writeFile(path string, w *gguf.Writer) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("export: %w", err)
	}
	if _, err := w.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("export %s: %w", filepath.Base(path), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return os.Rename(f.Name(), path)
}

// writeModelfile writes the Ollama Modelfile beside a GGUF export; the stop tokens are
// the model's EOS tokens, by their text in the GGUF's vocabulary.
func writeModelfile(dir, model, adapter string, m *engine.Model, w *gguf.Writer) error {
	var stops []string
	if toks, ok := w.Value("tokenizer.ggml.tokens").([]string); ok {
		for _, id := range m.Cfg.EOSTokenIDs {
			if int(id) < len(toks) {
				stops = append(stops, toks[id])
			}
		}
	}
	tmpl, _ := w.Value("tokenizer.chat_template").(string)
	mf := Modelfile(model, adapter, tmpl, stops)
	if err := os.WriteFile(filepath.Join(dir, ModelfileName), []byte(mf), 0o644); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}

// checkpointModules reads the target modules of a checkpoint's adapter_config.json.
func checkpointModules(dir string) ([]string, error) {
	path := filepath.Join(dir, engine.AdapterConfigFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	var pc struct {
		TargetModules []string `json:"target_modules"`
		PeftType      string   `json:"peft_type"`
	}
	if err := json.Unmarshal(b, &pc); err != nil {
		return nil, fmt.Errorf("export: %s: %w", path, err)
	}
	if pc.PeftType != "LORA" {
		return nil, fmt.Errorf("export: %s: peft_type %q is not LORA", path, pc.PeftType)
	}
	return pc.TargetModules, nil
}

// vllmTensorName is the shape of a LoRA tensor name that vLLM's loader parses for a
// Llama or Qwen2 model: the PEFT prefix, a decoder layer, a supported projection, lora_A
// or lora_B.
var vllmTensorName = regexp.MustCompile(`^base_model\.model\.model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)\.lora_[AB]\.weight$`)

// writePEFT writes the adapter as PEFT files that peft and vLLM load: the config and the
// weights (never the optimizer state), every tensor name checked against vLLM's rules.
func writePEFT(src, dir string) ([]string, error) {
	wf := filepath.Join(src, engine.AdapterWeightsFile)
	f, err := safetensors.ReadFile(wf)
	if err != nil {
		return nil, fmt.Errorf("export peft: %w", err)
	}
	for _, t := range f.Tensors {
		if !vllmTensorName.MatchString(t.Name) {
			return nil, engine.Inputf("cannot export as peft: tensor %s is not one vLLM's LoRA loader accepts", t.Name)
		}
	}
	for _, n := range []string{engine.AdapterConfigFile, engine.AdapterWeightsFile} {
		b, err := os.ReadFile(filepath.Join(src, n))
		if err != nil {
			return nil, fmt.Errorf("export peft: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			return nil, fmt.Errorf("export peft: %w", err)
		}
	}
	return []string{engine.AdapterConfigFile, engine.AdapterWeightsFile}, nil
}
