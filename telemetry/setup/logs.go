package setup

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// localHandler is the stderr handler; it adds trace_id and span_id to records logged
// under a span, so a local line can be matched to its trace.
type localHandler struct{ slog.Handler }

func newLocalHandler(w io.Writer, level slog.Level, json bool) slog.Handler {
	o := &slog.HandlerOptions{Level: level}
	if json {
		return localHandler{slog.NewJSONHandler(w, o)}
	}
	return localHandler{slog.NewTextHandler(w, o)}
}

func (h localHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h localHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return localHandler{h.Handler.WithAttrs(a)}
}
func (h localHandler) WithGroup(n string) slog.Handler { return localHandler{h.Handler.WithGroup(n)} }

// fanout sends each record to every handler that is enabled for it.
type fanout []slog.Handler

func (f fanout) Enabled(ctx context.Context, l slog.Level) bool {
	for _, h := range f {
		if h.Enabled(ctx, l) {
			return true
		}
	}
	return false
}

func (f fanout) Handle(ctx context.Context, r slog.Record) error {
	var errs []error
	for _, h := range f {
		if h.Enabled(ctx, r.Level) {
			errs = append(errs, h.Handle(ctx, r.Clone()))
		}
	}
	return errors.Join(errs...)
}

func (f fanout) WithAttrs(a []slog.Attr) slog.Handler {
	out := make(fanout, len(f))
	for i, h := range f {
		out[i] = h.WithAttrs(a)
	}
	return out
}

func (f fanout) WithGroup(n string) slog.Handler {
	out := make(fanout, len(f))
	for i, h := range f {
		out[i] = h.WithGroup(n)
	}
	return out
}

// levelGate applies the configured level to the OTel bridge as well.
type levelGate struct {
	slog.Handler
	min slog.Level
}

func (g levelGate) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= g.min && g.Handler.Enabled(ctx, l)
}

func (g levelGate) WithAttrs(a []slog.Attr) slog.Handler {
	return levelGate{g.Handler.WithAttrs(a), g.min}
}

func (g levelGate) WithGroup(n string) slog.Handler { return levelGate{g.Handler.WithGroup(n), g.min} }
