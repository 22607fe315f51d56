package tokenizer

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/dlclark/regexp2"
)

// TrainSpec describes a byte-level BPE vocabulary to learn (used by the built-in presets).
type TrainSpec struct {
	Corpus    string
	Merges    int
	VocabSize int      // pad with unused tokens up to this size (0: no padding)
	Special   []string // added special tokens, appended after the vocabulary
}

// Train learns merges deterministically from the corpus (GPT-2 pre-tokenization) and
// returns a complete tokenizer.json and the special tokens' ids.
func Train(spec TrainSpec) ([]byte, map[string]int32, error) {
	enc := bytesToUnicode()
	vocab := map[string]int32{}
	var order []string
	for b := 0; b < 256; b++ {
		s := string(enc[b])
		vocab[s] = int32(b)
		order = append(order, s)
	}
	re := regexp2.MustCompile(GPT2Pattern, regexp2.Unicode)
	pieces, err := splitRegex(context.Background(), re, piece{s: spec.Corpus}, isolated, false)
	if err != nil {
		return nil, nil, err
	}
	words := make([]string, len(pieces))
	for i, p := range pieces {
		words[i] = p.s
	}
	counts := map[string]int{}
	for _, w := range words {
		counts[w]++
	}
	type word struct {
		syms []string
		n    int
	}
	var ws []word
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var syms []string
		for i := 0; i < len(k); i++ {
			syms = append(syms, string(enc[k[i]]))
		}
		ws = append(ws, word{syms, counts[k]})
	}
	var merges [][2]string
	for len(merges) < spec.Merges {
		pairs := map[[2]string]int{}
		for _, w := range ws {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[[2]string{w.syms[i], w.syms[i+1]}] += w.n
			}
		}
		var best [2]string
		bestN := 1 // a pair must occur at least twice to be worth a token
		for p, n := range pairs {
			if n > bestN || (n == bestN && bestN > 1 && (p[0]+" "+p[1]) < (best[0]+" "+best[1])) {
				best, bestN = p, n
			}
		}
		if bestN <= 1 {
			break
		}
		merges = append(merges, best)
		m := best[0] + best[1]
		if _, ok := vocab[m]; !ok {
			vocab[m] = int32(len(order))
			order = append(order, m)
		}
		for wi := range ws {
			s := ws[wi].syms
			var out []string
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == best[0] && s[i+1] == best[1] {
					out = append(out, m)
					i++
				} else {
					out = append(out, s[i])
				}
			}
			ws[wi].syms = out
		}
	}
	next := int32(len(order))
	special := map[string]int32{}
	var added []AddedToken
	for _, s := range spec.Special {
		// The special tokens are vocabulary entries as well (as in GPT-2's tokenizer.json):
		// HuggingFace tokenizers gives an added token that is not in the vocabulary the
		// next id after the vocabulary, which the unused padding below would move.
		vocab[s] = next
		special[s] = next
		added = append(added, AddedToken{ID: next, Content: s, Special: true})
		next++
	}
	if spec.VocabSize > 0 {
		if int(next) > spec.VocabSize {
			return nil, nil, fmt.Errorf("tokenizer: %d tokens do not fit a vocabulary of %d", next, spec.VocabSize)
		}
		// Reserve the rest as unused vocabulary entries so the ids cover the embedding
		// matrix; no merge produces them, so they cost nothing when encoding.
		for int(next) < spec.VocabSize {
			vocab[fmt.Sprintf("<|unused_%d|>", next)] = next
			next++
		}
	}
	ms := make([]string, len(merges))
	for i, m := range merges {
		ms[i] = m[0] + " " + m[1]
	}
	doc := map[string]any{
		"version":        "1.0",
		"truncation":     nil,
		"padding":        nil,
		"added_tokens":   added,
		"normalizer":     nil,
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"post_processor": nil,
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "vocab": vocab, "merges": ms},
	}
	b, err := json.MarshalIndent(doc, "", " ")
	return b, special, err
}
