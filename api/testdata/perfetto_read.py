"""Reads a Perfetto trace with Perfetto's own protobuf classes (the `perfetto` package's
perfetto_trace_pb2) and prints what a trace processor would build from it, as JSON:
the tracks, and the slices with their begin/end times and debug annotations. A slice end
closes the innermost open slice of its track; an end without a begin, a slice left open, an
event on an undeclared track or a packet without a sequence id is an error.
Usage: python perfetto_read.py FILE"""

import json
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def main(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    tracks, slices, stacks = {}, [], {}
    for p in trace.packet:
        if not p.HasField("trusted_packet_sequence_id"):
            raise SystemExit("packet without trusted_packet_sequence_id")
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            tracks[d.uuid] = {"name": d.name, "parent": d.parent_uuid}
            continue
        e = p.track_event
        if e.track_uuid not in tracks:
            raise SystemExit(f"event on undeclared track {e.track_uuid}")
        if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            ann = {}
            for a in e.debug_annotations:
                kind = a.WhichOneof("value")
                ann[a.name] = getattr(a, kind)
            slices.append({"name": e.name, "track": e.track_uuid, "begin": p.timestamp, "end": None, "annotations": ann})
            stacks.setdefault(e.track_uuid, []).append(len(slices) - 1)
        elif e.type == pb.TrackEvent.TYPE_SLICE_END:
            st = stacks.get(e.track_uuid)
            if not st:
                raise SystemExit(f"slice end without a begin on track {e.track_uuid}")
            slices[st.pop()]["end"] = p.timestamp
        else:
            raise SystemExit(f"unexpected event type {e.type}")
    if any(stacks.values()):
        raise SystemExit("slices left open")
    json.dump({"tracks": {str(k): v for k, v in tracks.items()}, "slices": slices}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
