package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

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
	if c.Encrypted {
		return nil, invalidf("checkpoint %s holds encrypted files (save_weights_external): download them as they are; an export reads training and sampler checkpoints", c.TinkerPath())
	}
	if !s.exports.take(c.Tenant, s.cfg.Limits.MaxExportsPerTenant) {
		return nil, &Error{Kind: KindTooMany, RetryAfter: 5 * time.Second, Limit: "limits.max_exports_per_tenant",
			Msg: fmt.Sprintf("limits.max_exports_per_tenant: %d export(s) of this tenant are running; retry when one finishes", s.cfg.Limits.MaxExportsPerTenant)}
	}
	defer s.exports.give(c.Tenant)
	tmp, err := os.MkdirTemp("", "tuft-export-")
	if err != nil {
		return nil, classify(err)
	}
	out := filepath.Join(tmp, "out")
	files, err := s.be.Export(ctx, c.BaseModel, c.Dir, format, quant, out)
	if err != nil {
		os.RemoveAll(tmp)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, notFoundf("checkpoint %s: its files are missing on the server", c.TinkerPath())
		}
		if errors.Is(err, backend.ErrNoExport) {
			return nil, invalidf("cannot export %s as %s here: %v; download the PEFT adapter (format peft) and export with "+
				"`tuft checkpoints export DIR --model BASE_DIR` where the base model is", c.TinkerPath(), format, err)
		}
		return nil, classify(err)
	}
	return &Archive{Checkpoint: c, dir: out, files: files, temp: tmp,
		name: strings.ReplaceAll(c.RunID, ":", "_") + "_" + c.Name + "_" + format + ".tar"}, nil
}

// exportSlots counts each tenant's exports running (limits.max_exports_per_tenant). The
// export is counted while it is written; streaming the finished files is not.
type exportSlots struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *exportSlots) take(tenant string, max int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	if e.n[tenant] >= max {
		return false
	}
	e.n[tenant]++
	return true
}

func (e *exportSlots) give(tenant string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n[tenant]--; e.n[tenant] <= 0 {
		delete(e.n, tenant)
	}
}

// running is tenant's exports being written.
func (e *exportSlots) running(tenant string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[tenant]
}
