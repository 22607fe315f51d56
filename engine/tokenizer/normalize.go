package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites the text between added tokens before pre-tokenization.
type normalizer func(string) (string, error)

type normJSON struct {
	Type        string          `json:"type"`
	Normalizers []normJSON      `json:"normalizers"`
	Prepend     string          `json:"prepend"`
	Pattern     json.RawMessage `json:"pattern"`
	Content     string          `json:"content"`
	StripLeft   *bool           `json:"strip_left"`
	StripRight  *bool           `json:"strip_right"`
}

func parseNormalizer(n normJSON) (normalizer, error) {
	switch n.Type {
	case "Sequence":
		var steps []normalizer
		for i, c := range n.Normalizers {
			s, err := parseNormalizer(c)
			if err != nil {
				return nil, fmt.Errorf("normalizers[%d]: %w", i, err)
			}
			steps = append(steps, s)
		}
		return func(s string) (string, error) {
			var err error
			for _, f := range steps {
				if s, err = f(s); err != nil {
					return "", err
				}
			}
			return s, nil
		}, nil
	case "NFC":
		return plain(norm.NFC.String), nil
	case "NFD":
		return plain(norm.NFD.String), nil
	case "NFKC":
		return plain(norm.NFKC.String), nil
	case "NFKD":
		return plain(norm.NFKD.String), nil
	case "Lowercase":
		return plain(strings.ToLower), nil
	case "Strip":
		left, right := n.StripLeft == nil || *n.StripLeft, n.StripRight == nil || *n.StripRight
		return plain(func(s string) string {
			if left {
				s = strings.TrimLeftFunc(s, unicode.IsSpace)
			}
			if right {
				s = strings.TrimRightFunc(s, unicode.IsSpace)
			}
			return s
		}), nil
	case "Prepend":
		p := n.Prepend
		return plain(func(s string) string {
			if s == "" {
				return s
			}
			return p + s
		}), nil
	case "Replace":
		rep, err := parseReplace(n.Pattern, n.Content)
		if err != nil {
			return nil, fmt.Errorf("normalizer Replace: %w", err)
		}
		return rep, nil
	}
	return nil, fmt.Errorf("normalizer %q is not supported (Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace)", n.Type)
}

func plain(f func(string) string) normalizer {
	return func(s string) (string, error) { return f(s), nil }
}

// parseReplace reads Replace's {"String": …} or {"Regex": …} pattern (a normalizer and a
// decoder share it).
func parseReplace(raw json.RawMessage, content string) (normalizer, error) {
	var pat struct {
		Regex  *string
		String *string
	}
	if err := json.Unmarshal(raw, &pat); err != nil || (pat.Regex == nil) == (pat.String == nil) {
		return nil, fmt.Errorf("pattern must be {\"Regex\": …} or {\"String\": …}")
	}
	if pat.String != nil {
		from := *pat.String
		if from == "" {
			return plain(func(s string) string { return s }), nil
		}
		return plain(func(s string) string { return strings.ReplaceAll(s, from, content) }), nil
	}
	re, err := regexp2.Compile(*pat.Regex, regexp2.Unicode)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", *pat.Regex, err)
	}
	return func(s string) (string, error) {
		out, err := re.Replace(s, strings.ReplaceAll(content, "$", "$$"), -1, -1)
		if err != nil {
			return "", fmt.Errorf("replace: %w", err)
		}
		return out, nil
	}, nil
}

// shrinkOf bounds how many times shorter (in bytes) a normalizer can make a text: 3 for
// Unicode normalization (NFC composes Hangul jamo, 3 bytes into 1... and so on) and
// Lowercase (the Kelvin sign, 3 bytes, lowercases to "k"); a String Replace by its
// pattern's length over its content's; 0 when nothing bounds it (Strip, a Regex Replace,
// a Replace by nothing).
func shrinkOf(n normJSON) int {
	switch n.Type {
	case "Sequence":
		f := 1
		for _, c := range n.Normalizers {
			f *= shrinkOf(c)
		}
		return f
	case "NFC", "NFD", "NFKC", "NFKD", "Lowercase":
		return 3
	case "Prepend":
		return 1
	case "Replace":
		var pat struct{ String *string }
		if json.Unmarshal(n.Pattern, &pat) != nil || pat.String == nil || n.Content == "" {
			return 0
		}
		return max(1, (len(*pat.String)+len(n.Content)-1)/len(n.Content))
	}
	return 0
}
