package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// decoder turns the tokens' strings into the text's parts, as HF's decode_chain does.
type decoder func(toks []string) []string

type decJSON struct {
	Type     string          `json:"type"`
	Decoders []decJSON       `json:"decoders"`
	Pattern  json.RawMessage `json:"pattern"`
	Content  string          `json:"content"`
	Start    int             `json:"start"`
	Stop     int             `json:"stop"`
	preTokJSON
}

func (t *Tokenizer) parseDecoder(d decJSON) (decoder, error) {
	switch d.Type {
	case "Sequence":
		var steps []decoder
		for i, c := range d.Decoders {
			s, err := t.parseDecoder(c)
			if err != nil {
				return nil, fmt.Errorf("decoders[%d]: %w", i, err)
			}
			steps = append(steps, s)
		}
		return func(toks []string) []string {
			for _, s := range steps {
				toks = s(toks)
			}
			return toks
		}, nil
	case "ByteLevel":
		// Bytes that do not form UTF-8 are kept as they are (HF substitutes U+FFFD): a
		// stream decodes a character split across tokens once its last byte arrives.
		return func(toks []string) []string {
			var b strings.Builder
			for _, s := range toks {
				b.WriteString(t.byteUnmap(s))
			}
			return []string{b.String()}
		}, nil
	case "ByteFallback":
		return byteFallback, nil
	case "Fuse":
		return func(toks []string) []string { return []string{strings.Join(toks, "")} }, nil
	case "Strip":
		if len([]rune(d.Content)) != 1 || d.Start < 0 || d.Stop < 0 {
			return nil, fmt.Errorf("decoder Strip: content %q must be one character, start %d and stop %d non-negative", d.Content, d.Start, d.Stop)
		}
		// On the string, not its runes: a byte of a character split across tokens stays
		// as it is (a rune conversion would make it U+FFFD), so the text of more tokens
		// extends the text of fewer.
		c := d.Content
		return func(toks []string) []string {
			out := make([]string, len(toks))
			for i, s := range toks {
				for n := 0; n < d.Start && strings.HasPrefix(s, c); n++ {
					s = s[len(c):]
				}
				for n := 0; n < d.Stop && strings.HasSuffix(s, c); n++ {
					s = s[:len(s)-len(c)]
				}
				out[i] = s
			}
			return out
		}, nil
	case "Replace":
		rep, err := parseReplace(d.Pattern, d.Content)
		if err != nil {
			return nil, fmt.Errorf("decoder Replace: %w", err)
		}
		return func(toks []string) []string {
			out := make([]string, len(toks))
			for i, s := range toks {
				if r, err := rep(s); err == nil {
					out[i] = r
				} else {
					out[i] = s
				}
			}
			return out
		}, nil
	case "Metaspace":
		m, err := parseMetaspace(d.preTokJSON)
		if err != nil {
			return nil, fmt.Errorf("decoder Metaspace: %w", err)
		}
		r := []rune(m.rep)[0]
		return func(toks []string) []string {
			out := make([]string, len(toks))
			for i, s := range toks {
				// As HF: the first token loses every replacement character (not only a
				// leading one) unless nothing was prepended.
				drop := i == 0 && m.scheme != "never"
				out[i] = strings.Map(func(c rune) rune {
					if c != r {
						return c
					}
					if drop {
						return -1
					}
					return ' '
				}, s)
			}
			return out
		}, nil
	}
	return nil, fmt.Errorf("decoder %q is not supported (Sequence, ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace)", d.Type)
}

// byteFallback turns runs of <0xXX> tokens into the bytes they stand for. Bytes that do
// not form UTF-8 are kept as they are, as ByteLevel's are (HF writes one U+FFFD per
// byte): a stream decodes a character split across tokens once its last byte arrives.
func byteFallback(toks []string) []string {
	var out []string
	var pending []byte
	for _, s := range toks {
		if b, ok := byteToken(s); ok {
			pending = append(pending, b)
			continue
		}
		if len(pending) > 0 {
			out = append(out, string(pending))
			pending = pending[:0]
		}
		out = append(out, s)
	}
	if len(pending) > 0 {
		out = append(out, string(pending))
	}
	return out
}

// byteToken parses a byte-fallback token "<0xXX>".
func byteToken(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	var v byte
	for _, c := range s[3:5] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = byte(c - '0')
		case c >= 'A' && c <= 'F':
			d = byte(c-'A') + 10
		case c >= 'a' && c <= 'f':
			d = byte(c-'a') + 10
		default:
			return 0, false
		}
		v = v<<4 | d
	}
	return v, true
}
