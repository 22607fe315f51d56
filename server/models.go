// Package server assembles a running TuFT process from a config: telemetry, models,
// store, futures, backend, service and the HTTP API. cmd/tuft calls it; integration
// tests call it in process.
package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
)

// PresetDir is where a built-in preset is materialised under TUFT_HOME.
func PresetDir(home, preset string) string { return filepath.Join(home, "models", preset) }

// LoadModels loads every configured model, writing built-in presets on first use.
func LoadModels(cfg config.Config) ([]*engine.Model, []backend.ModelInfo, error) {
	var models []*engine.Model
	var infos []backend.ModelInfo
	for i, mc := range cfg.Models {
		if mc.Remote {
			continue // hosted by workers
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
		m, err := engine.Load(dir, mc.Name)
		if err != nil {
			return nil, nil, fmt.Errorf("models[%d] (%s): %w", i, mc.Name, err)
		}
		sig, err := dirSignature(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("models[%d] (%s): %w", i, mc.Name, err)
		}
		maxCtx := m.Cfg.MaxPositions
		if mc.MaxContextLength > 0 && mc.MaxContextLength < maxCtx {
			maxCtx = mc.MaxContextLength
		}
		models = append(models, m)
		text := backend.NewText(m)
		if text != nil {
			// Kept so that a worker can hand the tokenizer to API servers (Info).
			if text.TokenizerJSON, err = os.ReadFile(filepath.Join(dir, "tokenizer.json")); err != nil {
				return nil, nil, fmt.Errorf("models[%d] (%s): %w", i, mc.Name, err)
			}
		}
		infos = append(infos, backend.ModelInfo{Name: mc.Name, Arch: m.Cfg.Arch, VocabSize: m.Cfg.VocabSize,
			MaxContextLength: maxCtx, Signature: sig, Config: m.Cfg, Text: text})
	}
	return models, infos, nil
}

// dirSignature hashes config.json and every weight file of a model directory: the store
// remembers it so that runs are never resumed on different weights.
func dirSignature(dir string) (string, error) {
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
