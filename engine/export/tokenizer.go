package export

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/gguf"
)

// GGUF token types (llama.cpp's llama_token_type).
const (
	tokNormal  int32 = 1
	tokControl int32 = 3
	tokUser    int32 = 4
	tokUnused  int32 = 5
)

// setTokenizer writes the tokenizer.* metadata of a model export: copied from the base
// when it is a GGUF file, built from tokenizer.json for a Hugging Face directory (a
// byte-level BPE tokenizer, as the Llama-3, Qwen2 and SmolLM families ship).
func setTokenizer(w *gguf.Writer, m *engine.Model, base string) error {
	if strings.HasSuffix(base, ".gguf") {
		f, err := gguf.Open(base)
		if err != nil {
			return fmt.Errorf("export gguf: tokenizer from %s: %w", base, err)
		}
		defer f.Close()
		for _, kv := range f.KV {
			if strings.HasPrefix(kv.Key, "tokenizer.") {
				if err := w.Set(kv.Key, kv.Value); err != nil {
					return fmt.Errorf("export gguf: tokenizer from %s: %w", base, err)
				}
			}
		}
		return nil
	}
	path := filepath.Join(base, "tokenizer.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("export gguf: the base model has no tokenizer.json to describe in the GGUF: %w", err)
	}
	var tj struct {
		AddedTokens []struct {
			ID      int32  `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		PostProcessor json.RawMessage `json:"post_processor"`
		Model         struct {
			Type   string           `json:"type"`
			Vocab  map[string]int32 `json:"vocab"`
			Merges json.RawMessage  `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(b, &tj); err != nil {
		return fmt.Errorf("export gguf: %s: %w", path, err)
	}
	if tj.Model.Type != "BPE" {
		return engine.Inputf("export gguf: %s: tokenizer model %q is not written to GGUF (byte-level BPE only)", path, tj.Model.Type)
	}
	V := m.Cfg.VocabSize
	tokens := make([]string, V)
	types := make([]int32, V)
	for i := range tokens {
		tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), tokUnused
	}
	for s, id := range tj.Model.Vocab {
		if id >= 0 && int(id) < V {
			tokens[id], types[id] = s, tokNormal
		}
	}
	for _, t := range tj.AddedTokens {
		if t.ID >= 0 && int(t.ID) < V {
			tokens[t.ID], types[t.ID] = t.Content, tokUser
			if t.Special {
				types[t.ID] = tokControl
			}
		}
	}
	merges, err := mergeStrings(tj.Model.Merges)
	if err != nil {
		return fmt.Errorf("export gguf: %s: %w", path, err)
	}
	set := []struct {
		k string
		v any
	}{
		{"tokenizer.ggml.model", "gpt2"}, {"tokenizer.ggml.pre", preName(tj.PreTokenizer)},
		{"tokenizer.ggml.tokens", tokens}, {"tokenizer.ggml.token_type", types}, {"tokenizer.ggml.merges", merges},
		{"tokenizer.ggml.add_bos_token", m.Cfg.BOSTokenID >= 0 && strings.Contains(string(tj.PostProcessor), "TemplateProcessing")},
	}
	if m.Cfg.BOSTokenID >= 0 {
		set = append(set, struct {
			k string
			v any
		}{"tokenizer.ggml.bos_token_id", uint32(m.Cfg.BOSTokenID)})
	}
	if eos := m.Cfg.EOSTokenIDs; len(eos) > 0 {
		set = append(set, struct {
			k string
			v any
		}{"tokenizer.ggml.eos_token_id", uint32(eos[0])})
		if len(eos) > 1 {
			// GGUF has one EOS; the second stop token of the model (a chat turn's end,
			// such as <|im_end|>) is its end-of-turn token.
			set = append(set, struct {
				k string
				v any
			}{"tokenizer.ggml.eot_token_id", uint32(eos[1])})
		}
	}
	if m.ChatTemplate != "" {
		set = append(set, struct {
			k string
			v any
		}{"tokenizer.chat_template", m.ChatTemplate})
	}
	for _, s := range set {
		if err := w.Set(s.k, s.v); err != nil {
			return err
		}
	}
	return nil
}

// mergeStrings reads tokenizer.json's merges, as "a b" strings or ["a", "b"] pairs.
func mergeStrings(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 {
		return []string{}, nil
	}
	var s []string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("merges are neither strings nor pairs: %w", err)
	}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		out[i] = p[0] + " " + p[1]
	}
	return out, nil
}

// preName is llama.cpp's name (tokenizer.ggml.pre) for the pre-tokenizer of
// tokenizer.json: the splitting rules llama.cpp applies before BPE.
func preName(raw json.RawMessage) string {
	s := string(raw)
	switch {
	case strings.Contains(s, `"Digits"`) && strings.Contains(s, `"individual_digits":true`):
		return "smollm" // Digits (individual) then ByteLevel: SmolLM's
	case strings.Contains(s, `\\p{N}{1,3}`) && strings.Contains(s, `(?i:'s|'t|'re|'ve|'m|'ll|'d)`):
		return "llama-bpe" // Llama-3's regex
	case strings.Contains(s, `\\p{N}`) && strings.Contains(s, `(?i:'s|'t|'re|'ve|'m|'ll|'d)`):
		return "qwen2"
	}
	return "gpt-2" // ByteLevel with GPT-2's regex
}
