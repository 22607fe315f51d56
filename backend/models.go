package backend

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
)

// PresetDir is where a built-in preset is materialised under TUFT_HOME.
func PresetDir(home, preset string) string { return filepath.Join(home, "models", preset) }

// LoadModels loads every model of the config that this process hosts (not the remote
// ones) onto the configured device (engine.device, logged with the reason it was
// chosen), writing built-in presets on first use. The API server and `tuft worker` both
// load their models here.
func LoadModels(cfg config.Config, log *slog.Logger) ([]*engine.Model, []ModelInfo, error) {
	var models []*engine.Model
	var infos []ModelInfo
	var dev engine.Device
	for i, mc := range cfg.Models {
		if mc.Remote {
			continue // hosted by workers
		}
		if dev == nil {
			e := cfg.Engine
			wf, err := engine.ParseWeightFormat(e.CPUWeightFormat)
			if err != nil {
				return nil, nil, fmt.Errorf("engine.cpu_weight_format: %w", err)
			}
			d, why, err := engine.OpenDevice(e.Device, engine.DeviceOptions{CUDALibDirs: e.CUDALibDirs,
				CUDAFP32Weights: e.CUDAFP32Weights, CUDAMemoryLimit: e.CUDAMemoryLimitBytes, CUDAGraphs: e.CUDAGraphs,
				CUDAGraphsMax: e.CUDAGraphsMax, CUDANoGEMV: !e.CUDAGEMV, CPUWeightFormat: wf, CPUPrepackBytes: e.CPUPrepackBytes, CPUDecodeNoSpin: !e.CPUDecodeSpin})
			if err != nil {
				return nil, nil, fmt.Errorf("engine.device: %w", err)
			}
			log.Info("engine device", "device", d.Name(), "engine.device", e.Device, "reason", why, "engine.cpu_weight_format", e.CPUWeightFormat, "engine.cpu_prepack_bytes", e.CPUPrepackBytes, "engine.cpu_decode_spin", e.CPUDecodeSpin)
			dev = d
		}
		dir := mc.Path
		if mc.Preset != "" {
			dir = PresetDir(cfg.Home, mc.Preset)
			if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
				if err := engine.WritePreset(mc.Preset, dir); err != nil {
					return nil, nil, fmt.Errorf("models[%d] (%s): write preset %q: %w", i, mc.Name, mc.Preset, err)
				}
			}
		}
		m, err := engine.Load(dir, mc.Name, engine.OnDevice(dev))
		if err != nil {
			return nil, nil, fmt.Errorf("models[%d] (%s): %w", i, mc.Name, err)
		}
		sig, err := dirSignature(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("models[%d] (%s): %w", i, mc.Name, err)
		}
		maxCtx := mc.ContextLength(m.Cfg.MaxPositions)
		models = append(models, m)
		text := NewText(m)
		if text != nil {
			// Kept so that a worker can hand the tokenizer to API servers (Info); a GGUF
			// file's is rebuilt from its vocabulary.
			if text.TokenizerJSON = m.TokenizerJSON; text.TokenizerJSON == nil {
				if text.TokenizerJSON, err = os.ReadFile(filepath.Join(dir, "tokenizer.json")); err != nil {
					return nil, nil, fmt.Errorf("models[%d] (%s): %w", i, mc.Name, err)
				}
			}
		}
		infos = append(infos, ModelInfo{Name: mc.Name, Arch: m.Cfg.Arch, VocabSize: m.Cfg.VocabSize,
			MaxContextLength: maxCtx, Signature: sig, Config: m.Cfg, Text: text})
	}
	return models, infos, nil
}

// dirSignature hashes config.json and every weight file of a model directory (or the
// GGUF file a path names): the store remembers it so that runs are never resumed on
// different weights.
func dirSignature(dir string) (string, error) {
	if engine.IsGGUF(dir) {
		return fileSignature(dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if n == "config.json" || strings.HasSuffix(n, ".safetensors") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00", n)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("hash %s: %w", n, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fileSignature hashes one weight file with its base name, as dirSignature hashes each.
func fileSignature(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", filepath.Base(path))
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
