package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/tuft-go/tuft/engine/safetensors"
)

// PEFT file names.
const (
	AdapterConfigFile    = "adapter_config.json"
	AdapterWeightsFile   = "adapter_model.safetensors"
	OptimizerWeightsFile = "optimizer.safetensors"
)

type peftConfig struct {
	PeftType            string         `json:"peft_type"`
	TaskType            string         `json:"task_type"`
	R                   int            `json:"r"`
	LoraAlpha           float64        `json:"lora_alpha"`
	LoraDropout         float64        `json:"lora_dropout"`
	TargetModules       []string       `json:"target_modules"`
	Bias                string         `json:"bias"`
	FanInFanOut         bool           `json:"fan_in_fan_out"`
	BaseModelNameOrPath string         `json:"base_model_name_or_path"`
	InferenceMode       bool           `json:"inference_mode"`
	UseRslora           bool           `json:"use_rslora"`
	UseDora             bool           `json:"use_dora"`
	ModulesToSave       []string       `json:"modules_to_save"`
	RankPattern         map[string]int `json:"rank_pattern"`
	AlphaPattern        map[string]int `json:"alpha_pattern"`
	InitLoraWeights     bool           `json:"init_lora_weights"`
	Revision            *string        `json:"revision"`
}

// peftName is PEFT's tensor name of a layer projection's A or B.
func peftName(l int, p Proj, ab string) string {
	mod := "self_attn"
	if p >= ProjGate {
		mod = "mlp"
	}
	return fmt.Sprintf("base_model.model.model.layers.%d.%s.%s.lora_%s.weight", l, mod, p.ModuleName(), ab)
}

const lmHeadA, lmHeadB = "base_model.model.lm_head.lora_A.weight", "base_model.model.lm_head.lora_B.weight"

func loraTensors(lw *LoraWeights[float32], suffix string) []safetensors.Tensor {
	var out []safetensors.Tensor
	for l := range lw.Layers {
		for p := Proj(0); p < NumLayerProj; p++ {
			if q := lw.Layers[l][p]; q != nil {
				out = append(out,
					safetensors.FromFloat32(peftName(l, p, "A")+suffix, []int{lw.Rank, q.In}, q.A),
					safetensors.FromFloat32(peftName(l, p, "B")+suffix, []int{q.Out, lw.Rank}, q.B))
			}
		}
	}
	if q := lw.LMHead; q != nil {
		out = append(out, safetensors.FromFloat32(lmHeadA+suffix, []int{lw.Rank, q.In}, q.A),
			safetensors.FromFloat32(lmHeadB+suffix, []int{q.Out, lw.Rank}, q.B))
	}
	return out
}

// dimuonMomentumSuffix names Dimuon's momentum in optimizer.safetensors (torch's name for
// a momentum buffer).
const dimuonMomentumSuffix = ".momentum_buffer"

// SaveAdapter writes dir/adapter_config.json and dir/adapter_model.safetensors in PEFT's
// format and, withOptimizer, dir/optimizer.safetensors: the optimizer state (AdamW's
// moments as "<tensor>.exp_avg"/".exp_avg_sq", or Dimuon's momentum as
// "<tensor>.momentum_buffer") and, in the metadata, "step", "optimizer" (adamw | dimuon)
// and, for Dimuon, "optimizer_version". Gradients not yet applied are never written: a
// checkpoint may be published to other tenants, and the gradients of the owner's latest
// batch are the owner's. The directory is replaced atomically.
func (m *Model) SaveAdapter(a *Adapter, dir string, withOptimizer bool) error {
	return m.saveAdapter(a, dir, withOptimizer, nil)
}

// SnapshotAdapter copies what SaveAdapter writes of a (the parameters, the step and,
// withOptimizer, the optimizer state) into host memory of its own. It is the part of a
// save that reads the adapter, so it runs where the adapter's operations run (the model's
// loop); SaveAdapter of the snapshot then writes the files anywhere else, while a trains
// on, and the loop never waits for a disk.
func (m *Model) SnapshotAdapter(a *Adapter, withOptimizer bool) (*Adapter, error) {
	if err := m.AdapterToHost(a); err != nil {
		return nil, fmt.Errorf("save adapter: %w", err)
	}
	s := &Adapter{Config: a.Config, Step: a.Step, W: cloneLora(&a.W)}
	if withOptimizer {
		s.M, s.V = cloneLora(&a.M), cloneLora(&a.V)
	}
	return s, nil
}

// cloneLora is a deep copy of lw's host slices.
func cloneLora(lw *LoraWeights[float32]) LoraWeights[float32] {
	out := zeroLoraLike(lw)
	for l := range lw.Layers {
		for p := Proj(0); p < NumLayerProj; p++ {
			if q := lw.Layers[l][p]; q != nil {
				copy(out.Layers[l][p].A, q.A)
				copy(out.Layers[l][p].B, q.B)
			}
		}
	}
	if q := lw.LMHead; q != nil {
		copy(out.LMHead.A, q.A)
		copy(out.LMHead.B, q.B)
	}
	return out
}

// saveAdapter is SaveAdapter with a fault hook called after each step of the write
// protocol that changes the file system (tests crash the process there).
func (m *Model) saveAdapter(a *Adapter, dir string, withOptimizer bool, fault func(point string)) error {
	if fault == nil {
		fault = func(string) {}
	}
	if err := m.AdapterToHost(a); err != nil {
		return fmt.Errorf("save adapter: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("save adapter: %w", err)
	}
	// Finish what a crashed save left, first: its ".old" may be the only whole copy.
	if err := RecoverSave(dir); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".tmp-"+filepath.Base(dir)+"-")
	if err != nil {
		return fmt.Errorf("save adapter: %w", err)
	}
	defer os.RemoveAll(tmp)
	var mods []string
	t := targets(a.Config)
	for p := Proj(0); p < NumLayerProj; p++ {
		if t[p] {
			mods = append(mods, p.ModuleName())
		}
	}
	if a.Config.TrainUnembed {
		mods = append(mods, "lm_head")
	}
	sort.Strings(mods)
	pc := peftConfig{PeftType: "LORA", TaskType: "CAUSAL_LM", R: a.Config.Rank, LoraAlpha: a.Config.Alpha, TargetModules: mods,
		Bias: "none", BaseModelNameOrPath: m.Name, InferenceMode: true, RankPattern: map[string]int{}, AlphaPattern: map[string]int{},
		InitLoraWeights: true}
	cb, err := json.MarshalIndent(pc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, AdapterConfigFile), append(cb, '\n'), 0o644); err != nil {
		return fmt.Errorf("save adapter: %w", err)
	}
	meta := map[string]string{"format": "pt", "seed": strconv.FormatInt(a.Config.Seed, 10)}
	if err := safetensors.WriteFile(filepath.Join(tmp, AdapterWeightsFile), loraTensors(&a.W, ""), meta); err != nil {
		return fmt.Errorf("save adapter weights: %w", err)
	}
	if withOptimizer {
		var ts []safetensors.Tensor
		oc := a.Config.Optimizer.Normalize()
		om := map[string]string{"step": strconv.FormatInt(a.Step, 10), "optimizer": oc.Type}
		if oc.Type == OptimizerDimuon {
			ts = append(ts, loraTensors(&a.M, dimuonMomentumSuffix)...)
			om["optimizer_version"] = strconv.Itoa(oc.Version)
		} else {
			ts = append(ts, loraTensors(&a.M, ".exp_avg")...)
			ts = append(ts, loraTensors(&a.V, ".exp_avg_sq")...)
		}
		if err := safetensors.WriteFile(filepath.Join(tmp, OptimizerWeightsFile), ts, om); err != nil {
			return fmt.Errorf("save optimizer state: %w", err)
		}
	}
	if err := syncDir(tmp); err != nil {
		return err
	}
	fault("tmp-written")
	old := dir + ".old"
	_ = os.RemoveAll(old)
	fault("old-removed")
	if _, err := os.Stat(dir); err == nil {
		if err := os.Rename(dir, old); err != nil {
			return fmt.Errorf("save adapter: %w", err)
		}
	}
	fault("old-renamed")
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("save adapter: %w", err)
	}
	fault("new-renamed")
	_ = os.RemoveAll(old)
	err = syncDir(filepath.Dir(dir))
	fault("done")
	return err
}

// The write protocol of SaveAdapter, and what a crash between its steps leaves:
//
//  1. write the new files into a fresh ".tmp-<name>-*" directory and sync it
//     (crash: a stray temporary directory; dir is untouched);
//  2. remove a leftover "<dir>.old" (crash: as 1);
//  3. rename dir to "<dir>.old" (crash: only "<dir>.old", the last whole save, and the
//     temporary directory; dir is missing);
//  4. rename the temporary directory to dir (crash: dir is the new save, "<dir>.old" the
//     previous one);
//  5. remove "<dir>.old" and sync the parent directory.
//
// dir itself only ever appears whole (by rename), so RecoverSave brings back any of
// these states: a missing dir is "<dir>.old" renamed back, and what is left over is
// removed. SaveAdapter runs it first; a server runs it at start for every directory it
// owns; LoadAdapter reads "<dir>.old" when dir is missing, so readers never see nothing.

// RecoverSave repairs what a crash inside SaveAdapter left at dir (see above). The
// caller must be dir's only writer (saves of one adapter are serialised; at start no
// save is under way).
func RecoverSave(dir string) error {
	old := dir + ".old"
	_, derr := os.Stat(dir)
	_, oerr := os.Stat(old)
	switch {
	case os.IsNotExist(derr) && oerr == nil:
		// A crash between the two renames: the previous save is whole in ".old".
		if err := os.Rename(old, dir); err != nil {
			return fmt.Errorf("recover adapter %s from %s: %w", dir, old, err)
		}
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return fmt.Errorf("recover adapter %s: %w", dir, err)
		}
	case derr == nil && oerr == nil:
		// A crash after the second rename: dir is whole and newer.
		if err := os.RemoveAll(old); err != nil {
			return fmt.Errorf("recover adapter %s: remove %s: %w", dir, old, err)
		}
	}
	// Temporary directories of saves that never finished (os.MkdirTemp appends digits).
	ents, _ := os.ReadDir(filepath.Dir(dir))
	prefix := ".tmp-" + filepath.Base(dir) + "-"
	for _, e := range ents {
		if rest, ok := strings.CutPrefix(e.Name(), prefix); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
			if err := os.RemoveAll(filepath.Join(filepath.Dir(dir), e.Name())); err != nil {
				return fmt.Errorf("recover adapter %s: remove %s: %w", dir, e.Name(), err)
			}
		}
	}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// LoadAdapter reads an adapter saved by SaveAdapter (or any PEFT LoRA adapter for this
// architecture with the supported targets), checking every tensor against the model.
func (m *Model) LoadAdapter(dir string, withOptimizer bool) (*Adapter, error) {
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		if _, err := os.Stat(dir + ".old"); err == nil {
			dir += ".old" // a save crashed between its renames (see RecoverSave)
		}
	}
	cb, err := os.ReadFile(filepath.Join(dir, AdapterConfigFile))
	if err != nil {
		return nil, fmt.Errorf("load adapter: %w", err)
	}
	var pc peftConfig
	if err := json.Unmarshal(cb, &pc); err != nil {
		return nil, fmt.Errorf("load adapter: %s: %w", filepath.Join(dir, AdapterConfigFile), err)
	}
	cfgPath := filepath.Join(dir, AdapterConfigFile)
	if pc.PeftType != "LORA" || pc.R < 1 {
		return nil, fmt.Errorf("load adapter: %s: peft_type %q with r %d is not a LoRA adapter", cfgPath, pc.PeftType, pc.R)
	}
	if pc.UseDora || pc.UseRslora || len(pc.RankPattern) > 0 || len(pc.AlphaPattern) > 0 {
		return nil, fmt.Errorf("load adapter: %s: DoRA, rsLoRA and per-module rank/alpha patterns are not supported", cfgPath)
	}
	cfg := LoraConfig{Rank: pc.R, Alpha: pc.LoraAlpha}
	for _, mod := range pc.TargetModules {
		switch mod {
		case "q_proj", "k_proj", "v_proj", "o_proj":
			cfg.TrainAttn = true
		case "gate_proj", "up_proj", "down_proj":
			cfg.TrainMLP = true
		case "lm_head":
			cfg.TrainUnembed = true
		default:
			return nil, fmt.Errorf("load adapter: %s: target module %q is not supported", cfgPath, mod)
		}
	}
	wf := filepath.Join(dir, AdapterWeightsFile)
	f, err := safetensors.ReadFile(wf)
	if err != nil {
		return nil, fmt.Errorf("load adapter: %w", err)
	}
	if s, ok := f.Metadata["seed"]; ok {
		cfg.Seed, _ = strconv.ParseInt(s, 10, 64)
	}
	a := &Adapter{Config: cfg, W: zeroLike(m.Cfg, cfg), Grad: zeroLike(m.Cfg, cfg), M: zeroLike(m.Cfg, cfg), V: zeroLike(m.Cfg, cfg)}
	a.W.Scale = float32(cfg.Alpha / float64(cfg.Rank))
	if err := fill(&a.W, f, "", wf, true); err != nil {
		return nil, err
	}
	if withOptimizer {
		of := filepath.Join(dir, OptimizerWeightsFile)
		o, err := safetensors.ReadFile(of)
		if err != nil {
			return nil, fmt.Errorf("load optimizer state: %w", err)
		}
		oc, err := recordedOptimizer(o.Metadata, of)
		if err != nil {
			return nil, err
		}
		a.Config.Optimizer = oc
		// Gradients stored by older versions (".grad") are ignored: a loaded adapter
		// starts with none, whoever saved it.
		type part struct {
			lw *LoraWeights[float32]
			s  string
		}
		parts := []part{{&a.M, ".exp_avg"}, {&a.V, ".exp_avg_sq"}}
		if oc.Type == OptimizerDimuon {
			parts = []part{{&a.M, dimuonMomentumSuffix}}
		}
		for _, x := range parts {
			if err := fill(x.lw, o, x.s, of, true); err != nil {
				return nil, err
			}
		}
		a.Step, err = strconv.ParseInt(o.Metadata["step"], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("load optimizer state: %s: bad step %q", of, o.Metadata["step"])
		}
	}
	return a, nil
}

// recordedOptimizer reads the optimizer family from optimizer.safetensors' metadata. Files
// written before Dimuon existed say "adamw" (or nothing: adamw too).
func recordedOptimizer(meta map[string]string, file string) (OptimizerConfig, error) {
	oc := OptimizerConfig{Type: meta["optimizer"]}
	if v, ok := meta["optimizer_version"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return oc, fmt.Errorf("load optimizer state: %s: bad optimizer_version %q", file, v)
		}
		oc.Version = n
	}
	if err := oc.Validate(); err != nil {
		return oc, fmt.Errorf("load optimizer state: %s: %w", file, err)
	}
	return oc.Normalize(), nil
}

// LoadAdapterAs is LoadAdapter for a run whose optimizer is want. With the optimizer
// state, the checkpoint's recorded optimizer must be want: a mismatch is an InputError
// that names both, and nothing is loaded. Without it (weights only), the adapter starts
// fresh state for want.
func (m *Model) LoadAdapterAs(dir string, withOptimizer bool, want OptimizerConfig) (*Adapter, error) {
	if err := want.Validate(); err != nil {
		return nil, err
	}
	want = want.Normalize()
	a, err := m.LoadAdapter(dir, withOptimizer)
	if err != nil {
		return nil, err
	}
	if !withOptimizer {
		a.Config.Optimizer = want
		return a, nil
	}
	if got := a.Config.Optimizer; got != want {
		return nil, Inputf("load adapter: the checkpoint's optimizer state is %s, but the run asks for %s; resume with the checkpoint's optimizer, or load the weights only", got, want)
	}
	return a, nil
}

// fill copies tensors into lw, checking names and shapes; required makes a missing
// tensor an error.
func fill(lw *LoraWeights[float32], f *safetensors.File, suffix, file string, required bool) error {
	get := func(name string, shape []int, dst []float32) error {
		t, ok := f.Get(name + suffix)
		if !ok {
			if required {
				return fmt.Errorf("load adapter: %s: tensor %s is missing", file, name+suffix)
			}
			return nil
		}
		if !sameShape(t.Shape, shape) {
			return fmt.Errorf("load adapter: %s: tensor %s has shape %v, the model needs %v", file, name+suffix, t.Shape, shape)
		}
		v, err := t.Float32()
		if err != nil {
			return fmt.Errorf("load adapter: %s: %w", file, err)
		}
		for i, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("load adapter: %s: tensor %s holds a non-finite value at %d", file, name+suffix, i)
			}
		}
		copy(dst, v)
		return nil
	}
	for l := range lw.Layers {
		for p := Proj(0); p < NumLayerProj; p++ {
			if q := lw.Layers[l][p]; q != nil {
				if err := get(peftName(l, p, "A"), []int{lw.Rank, q.In}, q.A); err != nil {
					return err
				}
				if err := get(peftName(l, p, "B"), []int{q.Out, lw.Rank}, q.B); err != nil {
					return err
				}
			}
		}
	}
	if q := lw.LMHead; q != nil {
		if err := get(lmHeadA, []int{lw.Rank, q.In}, q.A); err != nil {
			return err
		}
		return get(lmHeadB, []int{q.Out, lw.Rank}, q.B)
	}
	return nil
}
