package tokenizer

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/dlclark/regexp2"
)

// piece is a pre-token: a part of the normalized text. start is true for the piece that
// begins the whole input (offset 0 of the original text), which Metaspace's "first"
// prepend scheme looks at.
type piece struct {
	s     string
	start bool
}

// preTokenizer splits pieces into smaller ones, or rewrites them (ByteLevel's byte map).
type preTokenizer func(ctx context.Context, ps []piece) ([]piece, error)

type preTokJSON struct {
	Type             string          `json:"type"`
	AddPrefixSpace   *bool           `json:"add_prefix_space"`
	UseRegex         *bool           `json:"use_regex"`
	TrimOffsets      *bool           `json:"trim_offsets"`
	Pattern          json.RawMessage `json:"pattern"`
	Behavior         string          `json:"behavior"`
	Invert           bool            `json:"invert"`
	IndividualDigits bool            `json:"individual_digits"`
	Replacement      string          `json:"replacement"`
	PrependScheme    string          `json:"prepend_scheme"`
	Split            *bool           `json:"split"`
	PreTokenizers    []preTokJSON    `json:"pretokenizers"`
}

// behavior is what Split does with a delimiter (HF's SplitDelimiterBehavior).
type behavior int

const (
	removed behavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

func parseBehavior(s string) (behavior, error) {
	switch s {
	case "Removed":
		return removed, nil
	case "Isolated", "":
		return isolated, nil
	case "MergedWithPrevious":
		return mergedWithPrevious, nil
	case "MergedWithNext":
		return mergedWithNext, nil
	case "Contiguous":
		return contiguous, nil
	}
	return 0, fmt.Errorf("split behavior %q is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous", s)
}

// parsePreTokenizer builds the pre-tokenizer chain. A ByteLevel step maps bytes to
// GPT-2's printable runes, so that the BPE model after it sees vocabulary symbols.
func (t *Tokenizer) parsePreTokenizer(p preTokJSON) (preTokenizer, error) {
	switch p.Type {
	case "Sequence":
		var steps []preTokenizer
		for i, c := range p.PreTokenizers {
			s, err := t.parsePreTokenizer(c)
			if err != nil {
				return nil, fmt.Errorf("pretokenizers[%d]: %w", i, err)
			}
			steps = append(steps, s)
		}
		return func(ctx context.Context, ps []piece) ([]piece, error) {
			var err error
			for _, s := range steps {
				if ps, err = s(ctx, ps); err != nil {
					return nil, err
				}
			}
			return ps, nil
		}, nil
	case "ByteLevel":
		t.byteLevel = true
		prefix := p.AddPrefixSpace != nil && *p.AddPrefixSpace
		var re *regexp2.Regexp
		if p.UseRegex == nil || *p.UseRegex {
			re = regexp2.MustCompile(GPT2Pattern, regexp2.Unicode)
		}
		// trim_offsets only changes offsets, which this package does not report.
		return func(ctx context.Context, ps []piece) ([]piece, error) {
			var out []piece
			for _, pc := range ps {
				if prefix && !strings.HasPrefix(pc.s, " ") {
					pc.s = " " + pc.s
				}
				sub := []piece{pc}
				if re != nil {
					var err error
					if sub, err = splitRegex(ctx, re, pc, isolated, false); err != nil {
						return nil, err
					}
				}
				for _, s := range sub {
					out = append(out, piece{t.byteMap(s.s), s.start})
				}
			}
			return out, nil
		}, nil
	case "Split":
		var pat struct {
			Regex  *string
			String *string
		}
		if err := json.Unmarshal(p.Pattern, &pat); err != nil || (pat.Regex == nil) == (pat.String == nil) {
			return nil, fmt.Errorf("pre_tokenizer Split: pattern must be {\"Regex\": …} or {\"String\": …}")
		}
		b, err := parseBehavior(p.Behavior)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		if b == removed {
			t.drops = true
		}
		expr := ""
		if pat.Regex != nil {
			expr = *pat.Regex
		} else {
			expr = regexp2.Escape(*pat.String)
		}
		re, err := regexp2.Compile(expr, regexp2.Unicode)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split pattern %q: %w", expr, err)
		}
		return eachPiece(func(ctx context.Context, pc piece) ([]piece, error) { return splitRegex(ctx, re, pc, b, p.Invert) }), nil
	case "Digits":
		b := contiguous
		if p.IndividualDigits {
			b = isolated
		}
		return eachPiece(func(_ context.Context, pc piece) ([]piece, error) { return splitChars(pc, unicode.IsNumber, b), nil }), nil
	case "Punctuation":
		b, err := parseBehavior(p.Behavior)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Punctuation: %w", err)
		}
		if b == removed {
			t.drops = true
		}
		return eachPiece(func(_ context.Context, pc piece) ([]piece, error) { return splitChars(pc, isPunctuation, b), nil }), nil
	case "WhitespaceSplit":
		t.drops = true
		return eachPiece(func(_ context.Context, pc piece) ([]piece, error) {
			return splitChars(pc, unicode.IsSpace, removed), nil
		}), nil
	case "Whitespace":
		t.drops = true
		// \w as Oniguruma (HF's regex engine) reads it: alphabetic (letters, letter
		// numbers), marks, decimal digits, connector punctuation and the join controls
		// ZWNJ/ZWJ (regexp2's \w leaves out spacing marks and join controls).
		const w = `\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}`
		re := regexp2.MustCompile(`[`+w+`]+|[^`+w+`\s]+`, regexp2.Unicode)
		return eachPiece(func(ctx context.Context, pc piece) ([]piece, error) { return splitRegex(ctx, re, pc, removed, true) }), nil
	case "Metaspace":
		m, err := parseMetaspace(p)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer Metaspace: %w", err)
		}
		return eachPiece(func(_ context.Context, pc piece) ([]piece, error) {
			pc.s = strings.ReplaceAll(pc.s, " ", m.rep)
			if !strings.HasPrefix(pc.s, m.rep) && (m.scheme == "always" || (m.scheme == "first" && pc.start)) {
				pc.s = m.rep + pc.s
			}
			if !m.split {
				return []piece{pc}, nil
			}
			r := []rune(m.rep)[0]
			return splitChars(pc, func(c rune) bool { return c == r }, mergedWithNext), nil
		}), nil
	}
	return nil, fmt.Errorf("pre_tokenizer %q is not supported (Sequence, ByteLevel, Split, Digits, Punctuation, Whitespace, WhitespaceSplit, Metaspace)", p.Type)
}

type metaspace struct {
	rep    string
	scheme string // always, first, never
	split  bool
}

// parseMetaspace reads Metaspace's fields for the pre-tokenizer and the decoder; older
// files say add_prefix_space instead of prepend_scheme.
func parseMetaspace(p preTokJSON) (metaspace, error) {
	m := metaspace{rep: p.Replacement, scheme: p.PrependScheme, split: p.Split == nil || *p.Split}
	if m.rep == "" {
		m.rep = "▁"
	}
	if len([]rune(m.rep)) != 1 {
		return m, fmt.Errorf("replacement %q must be one character", m.rep)
	}
	if m.scheme == "" {
		m.scheme = "always"
		if p.AddPrefixSpace != nil && !*p.AddPrefixSpace {
			m.scheme = "never"
		}
	}
	if m.scheme != "always" && m.scheme != "first" && m.scheme != "never" {
		return m, fmt.Errorf("prepend_scheme %q is not always, first or never", m.scheme)
	}
	return m, nil
}

func eachPiece(f func(context.Context, piece) ([]piece, error)) preTokenizer {
	return func(ctx context.Context, ps []piece) ([]piece, error) {
		var out []piece
		for i, pc := range ps {
			if i%1024 == 1023 {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
			}
			sub, err := f(ctx, pc)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
		}
		return out, nil
	}
}

// isPunctuation is HF's Punctuation test: ASCII punctuation (symbols included) or a
// Unicode punctuation character.
func isPunctuation(r rune) bool {
	return (r < 0x80 && unicode.IsPunct(r)) || (r < 0x80 && unicode.IsSymbol(r)) || unicode.In(r, unicode.P)
}

// span is a part of a piece with whether it matched the delimiter.
type span struct {
	lo, hi int // byte offsets
	match  bool
}

// splitRegex splits a piece at the regex's matches, each match a delimiter; it stops once
// ctx ends.
func splitRegex(ctx context.Context, re *regexp2.Regexp, pc piece, b behavior, invert bool) ([]piece, error) {
	rs := []rune(pc.s)
	// byte offsets of rune positions
	off := make([]int, len(rs)+1)
	for i, r := range rs {
		off[i+1] = off[i] + len(string(r))
	}
	var spans []span
	last := 0
	m, err := re.FindRunesMatch(rs)
	for n := 1; m != nil && err == nil; n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if m.Length > 0 {
			if m.Index > last {
				spans = append(spans, span{off[last], off[m.Index], false})
			}
			spans = append(spans, span{off[m.Index], off[m.Index+m.Length], true})
			last = m.Index + m.Length
		}
		m, err = re.FindNextMatch(m)
	}
	if err != nil {
		return nil, fmt.Errorf("pre-tokenize: %w", err)
	}
	if last < len(rs) {
		spans = append(spans, span{off[last], off[len(rs)], false})
	}
	return applyBehavior(pc, spans, b, invert), nil
}

// splitChars splits a piece at every character f accepts, each one delimiter.
func splitChars(pc piece, f func(rune) bool, b behavior) []piece {
	var spans []span
	last := 0
	for i, r := range pc.s {
		if f(r) {
			if i > last {
				spans = append(spans, span{last, i, false})
			}
			n := len(string(r))
			spans = append(spans, span{i, i + n, true})
			last = i + n
		}
	}
	if last < len(pc.s) {
		spans = append(spans, span{last, len(pc.s), false})
	}
	return applyBehavior(pc, spans, b, false)
}

// applyBehavior turns delimiter spans into pieces the way HF's NormalizedString.split
// does for each behavior.
func applyBehavior(pc piece, spans []span, b behavior, invert bool) []piece {
	if invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	var out []span
	prevMatch := false
	switch b {
	case isolated:
		out = spans
	case removed:
		for _, s := range spans {
			if !s.match {
				out = append(out, s)
			}
		}
	case mergedWithPrevious:
		for _, s := range spans {
			if s.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].hi = s.hi
			} else {
				out = append(out, s)
			}
			prevMatch = s.match
		}
	case mergedWithNext:
		for i := len(spans) - 1; i >= 0; i-- {
			s := spans[i]
			if s.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].lo = s.lo
			} else {
				out = append(out, s)
			}
			prevMatch = s.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case contiguous:
		for i, s := range spans {
			if i > 0 && s.match == prevMatch {
				out[len(out)-1].hi = s.hi
			} else {
				out = append(out, s)
			}
			prevMatch = s.match
		}
	}
	ps := make([]piece, 0, len(out))
	for _, s := range out {
		if s.hi > s.lo {
			ps = append(ps, piece{pc.s[s.lo:s.hi], pc.start && s.lo == 0})
		}
	}
	return ps
}
