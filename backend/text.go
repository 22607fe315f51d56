package backend

import (
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/chat"
)

// Text turns a model's text into tokens and back: its tokenizer and chat template. The
// OpenAI- and Anthropic-compatible routes need it (their clients send text); the Tinker
// routes take tokens. It is immutable and safe for concurrent use.
type Text struct {
	Codec engine.TextCodec
	// Template is the compiled chat template; nil when the model has none or it did not
	// compile (TemplateErr says why).
	Template    *chat.Template
	TemplateErr error
	// BOS and EOS are the template's bos_token and eos_token ("" when the model has none).
	BOS, EOS string
	// EOSTokenIDs end generation; their text is not part of a completion.
	EOSTokenIDs []int32
}

// NewText builds a model's Text; nil when the model has no tokenizer.
func NewText(m *engine.Model) *Text {
	if m.Tok == nil {
		return nil
	}
	t := &Text{Codec: m.Tok, EOSTokenIDs: append([]int32(nil), m.Cfg.EOSTokenIDs...)}
	if id := m.Cfg.BOSTokenID; id >= 0 && int(id) < m.Cfg.VocabSize {
		t.BOS = m.Tok.Decode([]int32{id})
	}
	if len(m.Cfg.EOSTokenIDs) > 0 {
		t.EOS = m.Tok.Decode(m.Cfg.EOSTokenIDs[:1])
	}
	if m.ChatTemplate != "" {
		t.Template, t.TemplateErr = chat.Parse(m.ChatTemplate)
	}
	return t
}
