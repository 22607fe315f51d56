package store

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/telemetry"
)

// Instrument wraps a store with telemetry at its seam: a span per operation
// ("store.SET", "store.GET", …) with db.system and db.operation (never keys' values), and
// the semantic conventions' db.client.operation.duration histogram with db.system.name
// and db.operation.name (the contract's tuft.redis.operation.duration is Redis's alone).
// The Redis store instruments itself with a go-redis hook instead. Spans and
// measurements go to the providers of opts (default: the globals).
func Instrument(s Store, opts ...telemetry.Option) Store {
	set := telemetry.NewSettings(opts...)
	return &instrumented{s: s, system: s.Kind(), tracer: set.Tracer(telemetry.ScopeStore), ins: set.Instruments}
}

type instrumented struct {
	s      Store
	system string
	tracer trace.Tracer
	ins    *telemetry.Instruments
}

var clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

func (i *instrumented) start(ctx context.Context, span, op string) (context.Context, trace.Span, time.Time) {
	ctx, sp := i.tracer.Start(ctx, span, clientSpan...)
	if sp.IsRecording() {
		sp.SetAttributes(attribute.String(telemetry.AttrDBSystem, i.system), attribute.String(telemetry.AttrDBOperation, op))
	}
	return ctx, sp, time.Now()
}

func (i *instrumented) end(ctx context.Context, sp trace.Span, t0 time.Time, op string, err error) {
	i.ins.StoreOperationDuration.Record(ctx, time.Since(t0).Seconds(),
		telemetry.RecordAttrs(telemetry.MAttrDBSystemName, i.system, telemetry.MAttrDBOperationName, op)...)
	if errors.Is(err, ErrNotFound) {
		err = nil // a miss is an answer, not a failure
	}
	telemetry.End(sp, err)
}

func (i *instrumented) Get(ctx context.Context, key string) ([]byte, error) {
	ctx, sp, t0 := i.start(ctx, telemetry.SpanStoreGET, "GET")
	v, err := i.s.Get(ctx, key)
	i.end(ctx, sp, t0, "GET", err)
	return v, err
}

func (i *instrumented) Set(ctx context.Context, key string, v []byte, ttl time.Duration) error {
	ctx, sp, t0 := i.start(ctx, telemetry.SpanStoreSET, "SET")
	err := i.s.Set(ctx, key, v, ttl)
	i.end(ctx, sp, t0, "SET", err)
	return err
}

// SetQueued implements Queuer: the span and the duration cover the wait until durable.
func (i *instrumented) SetQueued(ctx context.Context, key string, v []byte, ttl time.Duration, done func(error)) {
	ctx, sp, t0 := i.start(ctx, telemetry.SpanStoreSET, "SET")
	SetQueued(ctx, i.s, key, v, ttl, func(err error) {
		i.end(ctx, sp, t0, "SET", err)
		done(err)
	})
}

func (i *instrumented) SetNX(ctx context.Context, key string, v []byte, ttl time.Duration) (bool, error) {
	ctx, sp, t0 := i.start(ctx, telemetry.SpanStoreSETNX, "SETNX")
	ok, err := i.s.SetNX(ctx, key, v, ttl)
	i.end(ctx, sp, t0, "SETNX", err)
	return ok, err
}

func (i *instrumented) Del(ctx context.Context, keys ...string) error {
	ctx, sp, t0 := i.start(ctx, telemetry.SpanStoreDEL, "DEL")
	err := i.s.Del(ctx, keys...)
	i.end(ctx, sp, t0, "DEL", err)
	return err
}

func (i *instrumented) Scan(ctx context.Context, prefix string, fn func(string, []byte) error) error {
	ctx, sp, t0 := i.start(ctx, telemetry.SpanStoreSCAN, "SCAN")
	err := i.s.Scan(ctx, prefix, fn)
	i.end(ctx, sp, t0, "SCAN", err)
	return err
}

func (i *instrumented) Apply(ctx context.Context, ops []Op) error {
	ctx, sp, t0 := i.start(ctx, telemetry.SpanStoreAPPLY, "APPLY")
	err := i.s.Apply(ctx, ops)
	i.end(ctx, sp, t0, "APPLY", err)
	return err
}

func (i *instrumented) Clear(ctx context.Context) error {
	ctx, sp, t0 := i.start(ctx, telemetry.SpanStoreCLEAR, "CLEAR")
	err := i.s.Clear(ctx)
	i.end(ctx, sp, t0, "CLEAR", err)
	return err
}

// Kind implements Store.
func (i *instrumented) Kind() string { return i.s.Kind() }

// Close implements Store.
func (i *instrumented) Close() error { return i.s.Close() }
