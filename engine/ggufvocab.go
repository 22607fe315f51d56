package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/tuft-go/tuft/engine/gguf"
	"github.com/tuft-go/tuft/engine/tokenizer"
)

// GGUF token types (tokenizer.ggml.token_type).
const (
	ggufTokNormal      = 1
	ggufTokUnknown     = 2
	ggufTokControl     = 3
	ggufTokUserDefined = 4
	ggufTokByte        = 6
)

// ggufSpecials are the special tokens a GGUF file names.
type ggufSpecials struct {
	vocab         int
	bosID         int32
	eosIDs        []int32
	bos, eos, pad string
	addBOS        bool
}

// ggufPreTokenizers maps tokenizer.ggml.pre (llama.cpp's name for a BPE vocabulary's
// pre-tokenization) to the normalizer and pre-tokenizer of the tokenizer.json the model
// ships on HuggingFace.
var ggufPreTokenizers = map[string]struct {
	normalizer, preTokenizer any
	ignoreMerges             bool
}{
	"default": {nil, byteLevel(true), false},
	"gpt-2":   {nil, byteLevel(true), false},
	"smollm": {nil, map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Digits", "individual_digits": true}, byteLevel(true)}}, false},
	"llama3":    {nil, splitThenBytes(tokenizer.Llama3Pattern), true},
	"llama-bpe": {nil, splitThenBytes(tokenizer.Llama3Pattern), true},
	"qwen2":     {map[string]any{"type": "NFC"}, splitThenBytes(tokenizer.Qwen2Pattern), false},
}

func byteLevel(regex bool) map[string]any {
	return map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": regex}
}

func splitThenBytes(pattern string) map[string]any {
	return map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]string{"Regex": pattern}, "behavior": "Isolated", "invert": false},
		byteLevel(false)}}
}

// ggufTokenizer rebuilds the tokenizer.json of a GGUF vocabulary: "gpt2" (byte-level BPE:
// tokens and merges) or "llama" (SentencePiece: tokens and scores, merges derived from
// the scores as HuggingFace's converter does, with byte fallback).
func ggufTokenizer(f *gguf.File, arch string) ([]byte, ggufSpecials, error) {
	var sp ggufSpecials
	model, err := f.String("tokenizer.ggml.model")
	if err != nil {
		return nil, sp, err
	}
	tokens, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil {
		return nil, sp, err
	}
	sp.vocab = len(tokens)
	types := make([]int64, len(tokens))
	for i := range types {
		types[i] = ggufTokNormal
	}
	if _, ok := f.Lookup("tokenizer.ggml.token_type"); ok {
		if types, err = f.Ints("tokenizer.ggml.token_type"); err != nil {
			return nil, sp, err
		}
		if len(types) != len(tokens) {
			return nil, sp, fmt.Errorf("gguf: tokenizer.ggml.token_type has %d entries, tokenizer.ggml.tokens %d", len(types), len(tokens))
		}
	}
	vocab := make(map[string]int32, len(tokens))
	for i, t := range tokens {
		if prev, dup := vocab[t]; dup {
			return nil, sp, fmt.Errorf("gguf: tokenizer.ggml.tokens[%d] %q repeats entry %d", i, t, prev)
		}
		vocab[t] = int32(i)
	}
	tokenAt := func(key string) (int32, string, error) {
		id, err := f.Uint(key)
		if err != nil {
			return -1, "", err
		}
		if id >= uint64(len(tokens)) {
			return -1, "", fmt.Errorf("gguf: %s %d is outside the vocabulary of %d", key, id, len(tokens))
		}
		return int32(id), tokens[id], nil
	}
	optional := func(key string) (int32, string, error) {
		id, s, err := tokenAt(key)
		if errors.Is(err, gguf.ErrMissing) {
			return -1, "", nil
		}
		return id, s, err
	}
	var eos int32
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var e error
	sp.bosID, sp.bos, e = optional("tokenizer.ggml.bos_token_id")
	add(e)
	eos, sp.eos, e = optional("tokenizer.ggml.eos_token_id")
	add(e)
	if eos >= 0 {
		sp.eosIDs = append(sp.eosIDs, eos)
	}
	// End-of-turn and end-of-generation tokens also end a reply (Llama 3's <|eot_id|>).
	for _, key := range []string{"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		id, _, e := optional(key)
		add(e)
		if id >= 0 && id != eos {
			sp.eosIDs = append(sp.eosIDs, id)
		}
	}
	_, sp.pad, e = optional("tokenizer.ggml.padding_token_id")
	add(e)
	if b, err := f.Bool("tokenizer.ggml.add_bos_token"); err == nil {
		sp.addBOS = b
	} else if !errors.Is(err, gguf.ErrMissing) {
		add(err)
	}
	if len(errs) > 0 {
		return nil, sp, errors.Join(errs...)
	}

	var added []map[string]any
	for i, t := range tokens {
		if ty := types[i]; ty == ggufTokControl || ty == ggufTokUserDefined || ty == ggufTokUnknown {
			added = append(added, map[string]any{"id": i, "content": t, "special": ty != ggufTokUserDefined,
				"single_word": false, "lstrip": false, "rstrip": false, "normalized": false})
		}
	}
	doc := map[string]any{"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added, "post_processor": nil}
	switch model {
	case "gpt2":
		merges, err := f.Strings("tokenizer.ggml.merges")
		if err != nil {
			return nil, sp, err
		}
		pre := "default"
		if p, err := f.String("tokenizer.ggml.pre"); err == nil {
			pre = p
		} else if !errors.Is(err, gguf.ErrMissing) {
			return nil, sp, err
		}
		pt, ok := ggufPreTokenizers[pre]
		if !ok {
			names := make([]string, 0, len(ggufPreTokenizers))
			for n := range ggufPreTokenizers {
				names = append(names, n)
			}
			sort.Strings(names)
			return nil, sp, fmt.Errorf("gguf: tokenizer.ggml.pre %q is not supported (%v)", pre, names)
		}
		doc["normalizer"] = pt.normalizer
		doc["pre_tokenizer"] = pt.preTokenizer
		doc["decoder"] = byteLevel(true)
		doc["model"] = map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": pt.ignoreMerges,
			"vocab": vocab, "merges": merges}
	case "llama":
		scores, err := f.Floats("tokenizer.ggml.scores")
		if err != nil {
			return nil, sp, err
		}
		if len(scores) != len(tokens) {
			return nil, sp, fmt.Errorf("gguf: tokenizer.ggml.scores has %d entries, tokenizer.ggml.tokens %d", len(scores), len(tokens))
		}
		prefix := true
		if b, err := f.Bool("tokenizer.ggml.add_space_prefix"); err == nil {
			prefix = b
		}
		unk, _, err := optional("tokenizer.ggml.unknown_token_id")
		if err != nil {
			return nil, sp, err
		}
		var unkTok any
		if unk >= 0 {
			unkTok = tokens[unk]
		}
		norms := []any{map[string]any{"type": "Replace", "pattern": map[string]string{"String": " "}, "content": "▁"}}
		decs := []any{map[string]any{"type": "Replace", "pattern": map[string]string{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"}}
		if prefix {
			norms = append([]any{map[string]any{"type": "Prepend", "prepend": "▁"}}, norms...)
			decs = append(decs, map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0})
		}
		doc["normalizer"] = map[string]any{"type": "Sequence", "normalizers": norms}
		doc["pre_tokenizer"] = nil
		doc["decoder"] = map[string]any{"type": "Sequence", "decoders": decs}
		doc["model"] = map[string]any{"type": "BPE", "dropout": nil, "unk_token": unkTok, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
			"vocab": vocab, "merges": spmMerges(tokens, scores, types, vocab)}
	default:
		return nil, sp, fmt.Errorf("gguf: tokenizer.ggml.model %q is not supported (gpt2 or llama)", model)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, sp, err
	}
	return b, sp, nil
}

// maxMergedPiece bounds the pieces split into merges (SentencePiece's own limit is 16
// characters by default), so that a hostile vocabulary cannot cost quadratic time.
const maxMergedPiece = 128

// spmMerges derives BPE merges from SentencePiece scores: every split of a normal token
// into two vocabulary tokens is a merge, ranked by the merged token's score (highest
// first), ties in vocabulary order, as HuggingFace's SentencePiece converter ranks them.
func spmMerges(tokens []string, scores []float32, types []int64, vocab map[string]int32) [][2]string {
	type merge struct {
		l, r   string
		li, ri int32
		score  float32
	}
	var all []merge
	for i, t := range tokens {
		if types[i] != ggufTokNormal && types[i] != ggufTokUserDefined {
			continue
		}
		rs := []rune(t)
		if len(rs) > maxMergedPiece {
			continue
		}
		var local []merge
		for k := 1; k < len(rs); k++ {
			l, r := string(rs[:k]), string(rs[k:])
			li, okl := vocab[l]
			ri, okr := vocab[r]
			if okl && okr {
				local = append(local, merge{l, r, li, ri, scores[i]})
			}
		}
		sort.Slice(local, func(a, b int) bool {
			if local[a].li != local[b].li {
				return local[a].li < local[b].li
			}
			return local[a].ri < local[b].ri
		})
		all = append(all, local...)
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].score > all[b].score })
	out := make([][2]string, len(all))
	for i, m := range all {
		out[i] = [2]string{m.l, m.r}
	}
	return out
}
