package exenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/tokenizer"
)

// Server returns the base URL ($TUFT_URL, default http://127.0.0.1:10610) and API key
// ($TUFT_API_KEY, else $TUFT_HOME/api_key as written by `tuft launch`).
func Server() (string, string, error) {
	url := os.Getenv("TUFT_URL")
	if url == "" {
		url = "http://127.0.0.1:10610"
	}
	key := os.Getenv("TUFT_API_KEY")
	if key == "" {
		home := os.Getenv("TUFT_HOME")
		if home == "" {
			h, _ := os.UserHomeDir()
			home = filepath.Join(h, ".tuft")
		}
		b, err := os.ReadFile(filepath.Join(home, "api_key"))
		if err != nil {
			return "", "", fmt.Errorf("no API key: set TUFT_API_KEY or start `tuft launch` once (it writes %s/api_key): %w", home, err)
		}
		key = strings.TrimSpace(string(b))
	}
	return url, key, nil
}

// TinyTokenizer returns the tokenizer of the built-in tiny model (the preset is
// deterministic, so this is the server's tokenizer too).
func TinyTokenizer() (*tokenizer.Tokenizer, error) {
	dir, err := os.MkdirTemp("", "tuft-example-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := engine.WritePreset("tiny", dir); err != nil {
		return nil, err
	}
	return tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
}
