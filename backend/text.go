package backend

import (
	"fmt"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/chat"
	"github.com/tuft-go/tuft/engine/tokenizer"
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
	// TokenizerJSON and TemplateSource are the files the above were built from, for a
	// worker to hand to API servers (nil/"" where they are not kept).
	TokenizerJSON  []byte
	TemplateSource string
}

// NewText builds a model's Text; nil when the model has no tokenizer.
func NewText(m *engine.Model) *Text {
	if m.Tok == nil {
		return nil
	}
	return newText(m.Tok, m.ChatTemplate, m.Cfg)
}

// TextFromSource builds a Text from a tokenizer.json and a chat template source (what a
// worker sends), for the model architecture cfg.
func TextFromSource(tokenizerJSON []byte, template string, cfg engine.Config) (*Text, error) {
	tok, err := tokenizer.Parse(tokenizerJSON)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t := newText(tok, template, cfg)
	t.TokenizerJSON = tokenizerJSON
	return t, nil
}

func newText(codec engine.TextCodec, template string, cfg engine.Config) *Text {
	t := &Text{Codec: codec, EOSTokenIDs: append([]int32(nil), cfg.EOSTokenIDs...), TemplateSource: template}
	if id := cfg.BOSTokenID; id >= 0 && int(id) < cfg.VocabSize {
		t.BOS = codec.Decode([]int32{id})
	}
	if len(cfg.EOSTokenIDs) > 0 {
		t.EOS = codec.Decode(cfg.EOSTokenIDs[:1])
	}
	if template != "" {
		t.Template, t.TemplateErr = chat.Parse(template)
	}
	return t
}
