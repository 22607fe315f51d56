package tokenizer

import "unicode/utf8"

// Decoder is what a Stream needs of a tokenizer: *Tokenizer, engine.TextCodec and the
// API's codecs are ones.
type Decoder interface {
	Decode(ids []int32) string
}

// streamScan is how many of the last tokens a Stream tries as the start of its next
// window: a SentencePiece space ("▁" alone, which a leading Strip empties) needs two.
const streamScan = 8

// Stream decodes a sequence one token at a time: the texts Next returns are exactly the
// bytes by which Decode(the tokens so far) extends Decode(the tokens before), so their
// concatenation is Decode(all tokens). Decoding tokens one by one is not that: a
// SentencePiece decoder (Metaspace, or Replace ▁ and Strip) drops the space of a
// sequence's first token, so each lone token would lose its space; a character split
// across byte-fallback or byte-level tokens is whole only in their concatenation
// (NextText holds its first bytes back until it is).
//
// It decodes a short window of the last tokens rather than the whole sequence (O(1)
// work per token): the window starts at a token whose text, decoded as a sequence's
// start, is not empty, so the start's rules (the leading space stripped, every ▁ of
// the first token dropped) act within that text and leave later tokens' text as the
// whole sequence has it. A Stream is not safe for concurrent use.
type Stream struct {
	d    Decoder
	ids  []int32 // the window: the last tokens, from one whose text starts it
	done int     // bytes of Decode(ids) already returned
	held string  // NextText's bytes of an incomplete UTF-8 character
	// moved: the window no longer starts at the sequence's first token, whose empty
	// text may still be the start's rules at work (Llama 2's lone "▁").
	moved bool
}

// NewStream starts decoding a sequence with d.
func NewStream(d Decoder) *Stream { return &Stream{d: d} }

// Next appends a token and returns the bytes by which it extends the sequence's text
// (possibly part of a UTF-8 character).
func (s *Stream) Next(id int32) string {
	s.ids = append(s.ids, id)
	text := s.d.Decode(s.ids)
	if len(text) <= s.done {
		// A token with no text (an id outside the vocabulary) after a settled window
		// leaves it, so that runs of them do not grow it. Or a decoder that shortens the
		// text (a trailing Strip): what was returned cannot be taken back.
		if len(text) == s.done && s.moved && s.d.Decode(s.ids[len(s.ids)-1:]) == "" {
			s.ids = s.ids[:len(s.ids)-1]
		}
		return ""
	}
	out := text[s.done:]
	s.done = len(text)
	s.slide()
	return out
}

// NextText is Next less an incomplete UTF-8 character at the end, held until the tokens
// that complete it arrive (or Flush): text that can be shown as it comes.
func (s *Stream) NextText(id int32) string {
	b := s.held + s.Next(id)
	end := completeUTF8(b)
	s.held = b[end:]
	return b[:end]
}

// Flush returns the bytes NextText holds: an incomplete UTF-8 character at the end of
// the sequence, which Decode keeps as it is.
func (s *Stream) Flush() string {
	out := s.held
	s.held = ""
	return out
}

// Peek is the text id would add after the tokens so far, without appending it: an
// alternative token's text in context.
func (s *Stream) Peek(id int32) string {
	n := len(s.ids)
	text := s.d.Decode(append(s.ids[:n:n], id))
	if len(text) <= s.done {
		return ""
	}
	return text[s.done:]
}

// slide restarts the window at the latest of the last tokens whose text, decoded alone
// from there, is not empty. A run of more than streamScan tokens that decode to nothing
// (ids outside the vocabulary) keeps the window where it was, which stays exact.
func (s *Stream) slide() {
	for k := 1; k <= streamScan && k < len(s.ids); k++ {
		tail := s.ids[len(s.ids)-k:]
		if t := s.d.Decode(tail); t != "" {
			n := copy(s.ids, tail)
			s.ids = s.ids[:n]
			s.done = len(t)
			s.moved = true
			return
		}
	}
}

// completeUTF8 is the length of b without a trailing incomplete UTF-8 character (up to
// three bytes that later bytes may still complete).
func completeUTF8(b string) int {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < utf8.RuneSelf {
			return len(b)
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRuneInString(b[len(b)-k:]) {
				return len(b) - k
			}
			return len(b)
		}
	}
	return len(b)
}
