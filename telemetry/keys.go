package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Keys are the correlation ("share") keys of spec §3. They travel in the context, so a
// span started anywhere below a handler carries them without the code repeating them.
type Keys struct {
	SessionID         string
	TrainingRunID     string
	SamplingSessionID string
	RequestID         string
	OperationType     string
	BaseModel         string
	LoraRank          int
	Backward          *bool
}

type keysCtx struct{}

// WithKeys merges k into the keys already in ctx (non-zero fields of k win).
func WithKeys(ctx context.Context, k Keys) context.Context {
	cur, _ := ctx.Value(keysCtx{}).(Keys)
	if k.SessionID != "" {
		cur.SessionID = k.SessionID
	}
	if k.TrainingRunID != "" {
		cur.TrainingRunID = k.TrainingRunID
	}
	if k.SamplingSessionID != "" {
		cur.SamplingSessionID = k.SamplingSessionID
	}
	if k.RequestID != "" {
		cur.RequestID = k.RequestID
	}
	if k.OperationType != "" {
		cur.OperationType = k.OperationType
	}
	if k.BaseModel != "" {
		cur.BaseModel = k.BaseModel
	}
	if k.LoraRank != 0 {
		cur.LoraRank = k.LoraRank
	}
	if k.Backward != nil {
		cur.Backward = k.Backward
	}
	return context.WithValue(ctx, keysCtx{}, cur)
}

// KeysFrom returns the keys in ctx.
func KeysFrom(ctx context.Context) Keys {
	k, _ := ctx.Value(keysCtx{}).(Keys)
	return k
}

// MaxKeyAttributes is the most attributes AppendKeyAttributes adds: one per Keys field.
const MaxKeyAttributes = 8

// KeyAttributes returns the known keys as span attributes.
func KeyAttributes(k Keys) []attribute.KeyValue {
	return AppendKeyAttributes(make([]attribute.KeyValue, 0, MaxKeyAttributes), k)
}

// AppendKeyAttributes appends the known keys to dst as span attributes.
func AppendKeyAttributes(dst []attribute.KeyValue, k Keys) []attribute.KeyValue {
	add := func(key, v string) {
		if v != "" {
			dst = append(dst, attribute.String(key, v))
		}
	}
	add(AttrSessionID, k.SessionID)
	add(AttrTrainingRunID, k.TrainingRunID)
	add(AttrSamplingSessionID, k.SamplingSessionID)
	add(AttrRequestID, k.RequestID)
	add(AttrOperationType, k.OperationType)
	add(AttrBaseModel, k.BaseModel)
	if k.LoraRank != 0 {
		dst = append(dst, attribute.Int(AttrLoraRank, k.LoraRank))
	}
	if k.Backward != nil {
		dst = append(dst, attribute.Bool(AttrBackward, *k.Backward))
	}
	return dst
}

// StartSpan starts a span that carries every correlation key in ctx plus attrs. When
// the span is not recording (tracing off or sampled out) no attribute is built. The
// attributes go to the span in one call: the SDK regrows its attribute list on every
// call, and on the hot path those copies added up.
func StartSpan(ctx context.Context, tr trace.Tracer, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx, sp := tr.Start(ctx, name)
	if sp.IsRecording() {
		all := AppendKeyAttributes(make([]attribute.KeyValue, 0, MaxKeyAttributes+len(attrs)), KeysFrom(ctx))
		sp.SetAttributes(append(all, attrs...)...)
	}
	return ctx, sp
}

// End ends a span, marking it failed with the error when err is not nil.
func End(sp trace.Span, err error) {
	if err != nil && sp.IsRecording() {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// Baggage member names for the correlation keys: they cross process boundaries (a gRPC
// call to a worker) in W3C baggage beside the trace context.
var baggageKeys = []string{AttrSessionID, AttrTrainingRunID, AttrSamplingSessionID, AttrRequestID, AttrOperationType, AttrBaseModel}

func keyFields(k *Keys) []*string {
	return []*string{&k.SessionID, &k.TrainingRunID, &k.SamplingSessionID, &k.RequestID, &k.OperationType, &k.BaseModel}
}

// KeysToBaggage adds ctx's correlation keys to its W3C baggage, so the process on the
// other side of a call (see KeysFromBaggage) tags its spans and logs with them too.
func KeysToBaggage(ctx context.Context) context.Context {
	k := KeysFrom(ctx)
	bag := baggage.FromContext(ctx)
	for i, f := range keyFields(&k) {
		if *f == "" {
			continue
		}
		m, err := baggage.NewMemberRaw(baggageKeys[i], *f)
		if err != nil {
			continue
		}
		if b, err := bag.SetMember(m); err == nil {
			bag = b
		}
	}
	return baggage.ContextWithBaggage(ctx, bag)
}

// KeysFromBaggage merges the correlation keys found in ctx's baggage into its keys.
func KeysFromBaggage(ctx context.Context) context.Context {
	bag := baggage.FromContext(ctx)
	var k Keys
	found := false
	for i, f := range keyFields(&k) {
		if v := bag.Member(baggageKeys[i]).Value(); v != "" {
			*f, found = v, true
		}
	}
	if !found {
		return ctx
	}
	return WithKeys(ctx, k)
}
