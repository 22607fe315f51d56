package service

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/engine/export"
)

// CheckExport refuses, as a 400 naming it, an export format or quant that does not
// exist, before a download link is signed for it ("" format: the plain archive).
func CheckExport(format, quant string) error {
	if format == "" {
		if quant != "" {
			return invalidf("quant %q needs a format (gguf or gguf-lora)", quant)
		}
		return nil
	}
	f, err := export.ParseFormat(format)
	if err != nil {
		return classify(err)
	}
	_, err = export.ParseQuant(f, quant)
	return classify(err)
}

// OpenExport verifies an archive token and exports the checkpoint it grants in format
// (see docs/export.md), into a temporary directory that the returned Archive removes
// when closed. A refusal (a module the format cannot carry, a model hosted by a remote
// worker) is a 400 saying why.
func (s *Service) OpenExport(ctx context.Context, tok, format, quant string) (*Archive, error) {
	if err := CheckExport(format, quant); err != nil {
		return nil, err
	}
	c, err := s.archiveCheckpoint(tok)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "tuft-export-")
	if err != nil {
		return nil, classify(err)
	}
	out := filepath.Join(tmp, "out")
	files, err := s.be.Export(ctx, c.BaseModel, c.Dir, format, quant, out)
	if err != nil {
		os.RemoveAll(tmp)
		if errors.Is(err, backend.ErrNoExport) {
			return nil, invalidf("cannot export %s as %s here: %v; download the PEFT adapter (format peft) and export with "+
				"`tuft checkpoints export DIR --model BASE_DIR` where the base model is", c.TinkerPath(), format, err)
		}
		return nil, classify(err)
	}
	return &Archive{Checkpoint: c, dir: out, files: files, temp: tmp,
		name: strings.ReplaceAll(c.RunID, ":", "_") + "_" + c.Name + "_" + format + ".tar"}, nil
}
