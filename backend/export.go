package backend

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"

	"github.com/tuft-go/tuft/engine/export"
	"github.com/tuft-go/tuft/telemetry"
)

// Exporter is an Executor that can export a checkpoint in a format that needs the base
// model's weights (a merged model, a GGUF adapter with its base). The in-process
// executor is one; a remote worker is not (the weights are in its process).
type Exporter interface {
	// Export writes the checkpoint in ckptDir, an adapter of model, into the empty or
	// absent directory out, and returns the files written.
	Export(ctx context.Context, model, ckptDir, format, quant, out string) ([]string, error)
}

// ErrNoExport is returned where the executor hosting a model cannot export with it.
var ErrNoExport = errors.New("exporting with the base model's weights is not available")

// Export implements Exporter with the hosted model.
func (l *Local) Export(ctx context.Context, model, ckptDir, format, quant, out string) ([]string, error) {
	h, err := l.model(model)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := export.ParseFormat(format)
	if err != nil {
		return nil, err
	}
	return export.Write(export.Options{Format: f, Quant: quant, Model: h.model, Base: h.model.Dir, Adapter: ckptDir,
		TokenizerJSON: h.model.TokenizerJSON}, out)
}

// Export implements Exporter for the members that do.
func (r *Router) Export(ctx context.Context, model, ckptDir, format, quant, out string) ([]string, error) {
	ex, err := r.pick(model, "")
	if err != nil {
		return nil, err
	}
	x, ok := ex.(Exporter)
	if !ok {
		return nil, fmt.Errorf("%w for %q: it is hosted by a remote worker", ErrNoExport, model)
	}
	return x.Export(ctx, model, ckptDir, format, quant, out)
}

// Export writes a checkpoint of model in format (see engine/export) into out; a peft
// export needs no executor.
func (b *Backend) Export(ctx context.Context, model, ckptDir, format, quant, out string) (files []string, err error) {
	ctx, sp := b.tspan(ctx, telemetry.SpanTBExport, "", attribute.String(telemetry.AttrExportFormat, format))
	defer func() { telemetry.End(sp, err) }()
	if format == string(export.PEFT) {
		return export.Write(export.Options{Format: export.PEFT, Quant: quant, Adapter: ckptDir}, out)
	}
	x, ok := b.Exec.(Exporter)
	if !ok {
		return nil, fmt.Errorf("%w for %q: its executor does not hold the weights", ErrNoExport, model)
	}
	return x.Export(ctx, model, ckptDir, format, quant, out)
}
