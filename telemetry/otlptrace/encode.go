package otlptrace

import (
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// The OTLP trace encoding, written straight from the SDK's read-only spans into protobuf
// wire format. The OTLP exporters first copy every span into generated protobuf structs
// (several objects per attribute) and then marshal those by reflection; on the control
// plane, which makes a handful of spans per millisecond-long operation, that copy, the
// marshalling and the garbage they leave were most of what tracing cost. Encoding each
// span once, when it ends, into a byte buffer leaves nothing for the collector to scan.
//
// Field numbers are those of opentelemetry/proto/trace/v1/trace.proto,
// common/v1/common.proto, resource/v1/resource.proto and
// collector/trace/v1/trace_service.proto (OTLP 1.x); tests check the result against the
// generated types and against the OTLP exporter's own output.

// OTLP span flag bits beside the W3C trace flags (SpanFlags in trace.proto).
const (
	spanFlagsHasIsRemote = 0x100
	spanFlagsIsRemote    = 0x200
)

// beginMsg appends the tag of a length-delimited field and a one-byte length placeholder;
// endMsg fills it in (moving the body when the length needs more than one byte). Most
// nested messages (key/values, scopes) are under 128 bytes, so this rarely moves anything.
func beginMsg(b []byte, num protowire.Number) ([]byte, int) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return append(b, 0), len(b) + 1
}

func endMsg(b []byte, start int) []byte {
	n := len(b) - start
	if n < 0x80 {
		b[start-1] = byte(n)
		return b
	}
	extra := protowire.SizeVarint(uint64(n)) - 1
	for range extra {
		b = append(b, 0)
	}
	copy(b[start+extra:], b[start:start+n])
	protowire.AppendVarint(b[start-1:start-1], uint64(n))
	return b
}

// appendMsg appends an already encoded message as length-delimited field num.
func appendMsg(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendUint32(b []byte, num protowire.Number, v int) []byte {
	if v <= 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(min(int64(v), math.MaxUint32)))
}

// appendKeyValues appends attrs as repeated KeyValue field num.
func appendKeyValues(b []byte, num protowire.Number, attrs []attribute.KeyValue) []byte {
	for _, kv := range attrs {
		var start int
		b, start = beginMsg(b, num)
		b = protowire.AppendTag(b, 1, protowire.BytesType) // key, even when empty
		b = protowire.AppendString(b, string(kv.Key))
		b = appendAnyValue(b, 2, kv.Value)
		b = endMsg(b, start)
	}
	return b
}

// appendAnyValue appends v as AnyValue field num. An empty value is an AnyValue with no
// field set, as the OTLP exporter writes it.
func appendAnyValue(b []byte, num protowire.Number, v attribute.Value) []byte {
	var start int
	b, start = beginMsg(b, num)
	switch v.Type() {
	case attribute.STRING:
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, v.AsString())
	case attribute.BOOL:
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = protowire.AppendTag(b, 4, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(v.AsFloat64()))
	case attribute.BYTESLICE:
		b = protowire.AppendTag(b, 7, protowire.BytesType)
		b = protowire.AppendBytes(b, v.AsByteSlice())
	case attribute.BOOLSLICE, attribute.INT64SLICE, attribute.FLOAT64SLICE, attribute.STRINGSLICE, attribute.SLICE:
		var arr int
		b, arr = beginMsg(b, 5) // ArrayValue
		b = appendArray(b, v)
		b = endMsg(b, arr)
	case attribute.MAP:
		var kvl int
		b, kvl = beginMsg(b, 6) // KeyValueList
		b = appendKeyValues(b, 1, v.AsMap())
		b = endMsg(b, kvl)
	}
	return endMsg(b, start)
}

// appendArray appends the elements of a slice value as ArrayValue.values (field 1).
func appendArray(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.BOOLSLICE:
		b = appendValues(b, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		b = appendValues(b, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		b = appendValues(b, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		b = appendValues(b, v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		b = appendValues(b, v.AsSlice(), func(x attribute.Value) attribute.Value { return x })
	}
	return b
}

func appendValues[T any](b []byte, xs []T, value func(T) attribute.Value) []byte {
	for _, x := range xs {
		b = appendAnyValue(b, 1, value(x))
	}
	return b
}

func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | spanFlagsHasIsRemote
	if parent.IsRemote() {
		f |= spanFlagsIsRemote
	}
	return f
}

func unixNano(t interface{ UnixNano() int64 }) uint64 { return uint64(max(0, t.UnixNano())) }

// appendSpan appends s as one Span message body (trace.proto Span), without its tag.
func appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, tid[:])
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, sid[:])
	if ts := sc.TraceState(); ts.Len() > 0 {
		b = appendString(b, 3, ts.String())
	}
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, psid[:])
	}
	b = appendString(b, 5, s.Name())
	if k := s.SpanKind(); k != trace.SpanKindUnspecified {
		b = protowire.AppendTag(b, 6, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(k))
	}
	b = protowire.AppendTag(b, 7, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, unixNano(s.StartTime()))
	b = protowire.AppendTag(b, 8, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, unixNano(s.EndTime()))
	b = appendKeyValues(b, 9, s.Attributes())
	b = appendUint32(b, 10, s.DroppedAttributes())
	for _, e := range s.Events() {
		var start int
		b, start = beginMsg(b, 11)
		b = protowire.AppendTag(b, 1, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, unixNano(e.Time))
		b = appendString(b, 2, e.Name)
		b = appendKeyValues(b, 3, e.Attributes)
		b = appendUint32(b, 4, e.DroppedAttributeCount)
		b = endMsg(b, start)
	}
	b = appendUint32(b, 12, s.DroppedEvents())
	for _, l := range s.Links() {
		var start int
		b, start = beginMsg(b, 13)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, ltid[:])
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, lsid[:])
		if ts := l.SpanContext.TraceState(); ts.Len() > 0 {
			b = appendString(b, 3, ts.String())
		}
		b = appendKeyValues(b, 4, l.Attributes)
		b = appendUint32(b, 5, l.DroppedAttributeCount)
		b = protowire.AppendTag(b, 6, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		b = endMsg(b, start)
	}
	b = appendUint32(b, 14, s.DroppedLinks())
	// Status is always present (an empty one means UNSET), as the exporter writes it.
	var st int
	b, st = beginMsg(b, 15)
	status := s.Status()
	b = appendString(b, 2, status.Description)
	var code uint64
	switch status.Code {
	case codes.Ok:
		code = 1
	case codes.Error:
		code = 2
	}
	if code != 0 {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, code)
	}
	b = endMsg(b, st)
	b = protowire.AppendTag(b, 16, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, spanFlags(sc.TraceFlags(), parent))
}

// appendResource appends r as a Resource message body.
func appendResource(b []byte, r *resource.Resource) []byte {
	if r == nil {
		return b
	}
	return appendKeyValues(b, 1, r.Attributes())
}

// appendScope appends sc as an InstrumentationScope message body.
func appendScope(b []byte, sc instrumentation.Scope) []byte {
	b = appendString(b, 1, sc.Name)
	b = appendString(b, 2, sc.Version)
	return appendKeyValues(b, 3, sc.Attributes.ToSlice())
}
