package api

import (
	"fmt"
	"math"
	"sort"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tuft-go/tuft/service"
)

// A session's span record as a Perfetto trace (.pftrace): the protobuf message
// perfetto.protos.Trace, written by hand (no generated code for one message family).
// One root track names the session; its spans are slices on child tracks ("lanes"),
// each lane holding only properly nested slices, as Perfetto requires of a track. A
// span's attributes, ids and status become the slice's debug annotations. Field numbers
// are those of Perfetto's public protos (trace.proto, trace_packet.proto,
// track_event/track_event.proto, track_descriptor.proto, debug_annotation.proto).
const (
	pfTracePacket = 1 // Trace.packet

	pfPacketTimestamp     = 8  // TracePacket.timestamp (ns, the boot clock by default)
	pfPacketSequenceID    = 10 // TracePacket.trusted_packet_sequence_id
	pfPacketTrackEvent    = 11 // TracePacket.track_event
	pfPacketSequenceFlags = 13 // TracePacket.sequence_flags
	pfPacketTrackDesc     = 60 // TracePacket.track_descriptor

	pfSeqIncrementalStateCleared = 1 // SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED

	pfTrackUUID   = 1 // TrackDescriptor.uuid
	pfTrackName   = 2 // TrackDescriptor.name
	pfTrackParent = 5 // TrackDescriptor.parent_uuid

	pfEventAnnotations = 4  // TrackEvent.debug_annotations
	pfEventType        = 9  // TrackEvent.type
	pfEventTrackUUID   = 11 // TrackEvent.track_uuid
	pfEventName        = 23 // TrackEvent.name

	pfSliceBegin = 1 // TrackEvent.Type.TYPE_SLICE_BEGIN
	pfSliceEnd   = 2 // TrackEvent.Type.TYPE_SLICE_END

	pfAnnBool   = 2  // DebugAnnotation.bool_value
	pfAnnInt    = 4  // DebugAnnotation.int_value
	pfAnnDouble = 5  // DebugAnnotation.double_value
	pfAnnString = 6  // DebugAnnotation.string_value
	pfAnnName   = 10 // DebugAnnotation.name

	pfSequence = 1 // the one packet sequence of the file
	pfRootUUID = 1 // the session's track; lanes are 2, 3, …
)

// perfettoTrace encodes a session's spans (in any order) as a Perfetto trace.
func perfettoTrace(session string, spans []service.SpanRecord) []byte {
	sorted := append([]service.SpanRecord(nil), spans...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if !sorted[i].Start.Equal(sorted[j].Start) {
			return sorted[i].Start.Before(sorted[j].Start)
		}
		return sorted[i].End.After(sorted[j].End) // the enclosing span first
	})
	lanes := assignLanes(sorted)
	nLanes := 0
	for _, l := range lanes {
		nLanes = max(nLanes, l+1)
	}

	var out []byte
	packet := func(body []byte) {
		out = protowire.AppendTag(out, pfTracePacket, protowire.BytesType)
		out = protowire.AppendBytes(out, body)
	}
	track := func(uuid, parent uint64, name string, first bool) {
		var d []byte
		d = protowire.AppendTag(d, pfTrackUUID, protowire.VarintType)
		d = protowire.AppendVarint(d, uuid)
		d = protowire.AppendTag(d, pfTrackName, protowire.BytesType)
		d = protowire.AppendString(d, name)
		if parent != 0 {
			d = protowire.AppendTag(d, pfTrackParent, protowire.VarintType)
			d = protowire.AppendVarint(d, parent)
		}
		var p []byte
		p = protowire.AppendTag(p, pfPacketSequenceID, protowire.VarintType)
		p = protowire.AppendVarint(p, pfSequence)
		if first {
			p = protowire.AppendTag(p, pfPacketSequenceFlags, protowire.VarintType)
			p = protowire.AppendVarint(p, pfSeqIncrementalStateCleared)
		}
		p = protowire.AppendTag(p, pfPacketTrackDesc, protowire.BytesType)
		p = protowire.AppendBytes(p, d)
		packet(p)
	}
	track(pfRootUUID, 0, "session "+session, true)
	for l := range nLanes {
		track(uint64(pfRootUUID+1+l), pfRootUUID, fmt.Sprintf("lane %d", l+1), false)
	}

	// Slice begins and ends, in time order. At one instant: first the ends of slices begun
	// earlier (the inner, later-begun one first), then the begins (the enclosing one
	// first), then the ends of zero-length slices (inner first), so nesting stays proper.
	type edge struct {
		ns    uint64
		phase int // 0 end of an earlier slice, 1 begin, 2 end of a zero-length slice
		i     int
	}
	edges := make([]edge, 0, 2*len(sorted))
	for i, sp := range sorted {
		b := unixNanos(sp.Start)
		e := max(unixNanos(sp.End), b)
		end := 0
		if e == b {
			end = 2
		}
		edges = append(edges, edge{b, 1, i}, edge{e, end, i})
	}
	sort.SliceStable(edges, func(a, b int) bool {
		x, y := edges[a], edges[b]
		if x.ns != y.ns {
			return x.ns < y.ns
		}
		if x.phase != y.phase {
			return x.phase < y.phase
		}
		if x.phase == 1 {
			return x.i < y.i
		}
		return x.i > y.i
	})
	for _, e := range edges {
		sp := sorted[e.i]
		var ev []byte
		ev = protowire.AppendTag(ev, pfEventType, protowire.VarintType)
		begin := e.phase == 1
		if begin {
			ev = protowire.AppendVarint(ev, pfSliceBegin)
		} else {
			ev = protowire.AppendVarint(ev, pfSliceEnd)
		}
		ev = protowire.AppendTag(ev, pfEventTrackUUID, protowire.VarintType)
		ev = protowire.AppendVarint(ev, uint64(pfRootUUID+1+lanes[e.i]))
		if begin {
			ev = protowire.AppendTag(ev, pfEventName, protowire.BytesType)
			ev = protowire.AppendString(ev, sp.Name)
			ev = appendAnnotations(ev, sp)
		}
		var p []byte
		p = protowire.AppendTag(p, pfPacketTimestamp, protowire.VarintType)
		p = protowire.AppendVarint(p, e.ns)
		p = protowire.AppendTag(p, pfPacketSequenceID, protowire.VarintType)
		p = protowire.AppendVarint(p, pfSequence)
		p = protowire.AppendTag(p, pfPacketTrackEvent, protowire.BytesType)
		p = protowire.AppendBytes(p, ev)
		packet(p)
	}
	return out
}

func unixNanos(t time.Time) uint64 {
	n := t.UnixNano()
	if n < 0 {
		return 0
	}
	return uint64(n)
}

// assignLanes gives each span (sorted by start, enclosing first) a lane, so that a lane
// reads as call trees: a span goes on the lane where its parent is the innermost slice
// still open and encloses it, else on the first lane with nothing open, else on a new one.
// A child that outlives its parent (an asynchronous execution) starts a tree of its own.
func assignLanes(spans []service.SpanRecord) []int {
	type open struct {
		id  string
		end int64
	}
	var stacks [][]open
	out := make([]int, len(spans))
	for i, sp := range spans {
		b, e := sp.Start.UnixNano(), max(sp.End.UnixNano(), sp.Start.UnixNano())
		lane, free := -1, -1
		for l := range stacks {
			st := stacks[l]
			for len(st) > 0 && st[len(st)-1].end <= b {
				st = st[:len(st)-1]
			}
			stacks[l] = st
			switch {
			case len(st) == 0:
				if free < 0 {
					free = l
				}
			case sp.ParentSpanID != "" && st[len(st)-1].id == sp.ParentSpanID && st[len(st)-1].end >= e:
				lane = l
			}
		}
		if lane < 0 {
			lane = free
		}
		if lane < 0 {
			stacks = append(stacks, nil)
			lane = len(stacks) - 1
		}
		stacks[lane] = append(stacks[lane], open{sp.SpanID, e})
		out[i] = lane
	}
	return out
}

// appendAnnotations adds a span's ids, status and attributes as debug annotations.
func appendAnnotations(ev []byte, sp service.SpanRecord) []byte {
	ann := func(name string, val func([]byte) []byte) {
		var a []byte
		a = protowire.AppendTag(a, pfAnnName, protowire.BytesType)
		a = protowire.AppendString(a, name)
		a = val(a)
		ev = protowire.AppendTag(ev, pfEventAnnotations, protowire.BytesType)
		ev = protowire.AppendBytes(ev, a)
	}
	str := func(s string) func([]byte) []byte {
		return func(a []byte) []byte {
			a = protowire.AppendTag(a, pfAnnString, protowire.BytesType)
			return protowire.AppendString(a, s)
		}
	}
	ann("trace_id", str(sp.TraceID))
	ann("span_id", str(sp.SpanID))
	if sp.ParentSpanID != "" {
		ann("parent_span_id", str(sp.ParentSpanID))
	}
	ann("status", str(sp.Status))
	if sp.Error != "" {
		ann("error", str(sp.Error))
	}
	keys := make([]string, 0, len(sp.Attributes))
	for k := range sp.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch v := sp.Attributes[k].(type) {
		case bool:
			ann(k, func(a []byte) []byte {
				a = protowire.AppendTag(a, pfAnnBool, protowire.VarintType)
				return protowire.AppendVarint(a, protowire.EncodeBool(v))
			})
		case int64:
			ann(k, func(a []byte) []byte {
				a = protowire.AppendTag(a, pfAnnInt, protowire.VarintType)
				return protowire.AppendVarint(a, uint64(v))
			})
		case float64:
			// A record read back from JSON holds every number as float64: an integral
			// one is written as an int, as the span had it.
			if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
				ann(k, func(a []byte) []byte {
					a = protowire.AppendTag(a, pfAnnInt, protowire.VarintType)
					return protowire.AppendVarint(a, uint64(int64(v)))
				})
				continue
			}
			ann(k, func(a []byte) []byte {
				a = protowire.AppendTag(a, pfAnnDouble, protowire.Fixed64Type)
				return protowire.AppendFixed64(a, math.Float64bits(v))
			})
		case string:
			ann(k, str(v))
		default:
			ann(k, str(fmt.Sprint(v)))
		}
	}
	return ev
}
