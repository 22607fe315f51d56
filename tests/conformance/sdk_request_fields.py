"""Lists every field of the requests a Tinker SDK release can send, for api's field-walk
test (api/sdkfields_test.go), which asserts that the server honours or refuses each one.

    ~/.cache/tuft/sdk/0.38.0/bin/python tests/conformance/sdk_request_fields.py \
        > api/testdata/sdk-0.38.0-requests.json

JSON requests: every pydantic model in tinker.types whose name ends in "Request", and every
model reachable from their fields (plus the optimizer families, which the SDK types only
as their open base class). Protobuf requests: every message reachable from
ForwardBackwardRequest in the SDK's tinker_public schema. Values: the literal values of the
enumerations the server must accept or refuse one by one.
"""

import inspect
import json
import sys
import typing

import tinker
from pydantic import BaseModel
from tinker import types
from tinker.proto import tinker_public_pb2


def models_in(tp):
    if typing.get_origin(tp) is not None:
        for a in typing.get_args(tp):
            yield from models_in(a)
    elif inspect.isclass(tp) and issubclass(tp, BaseModel):
        yield tp


def json_types():
    roots = [c for n, c in vars(types).items() if inspect.isclass(c) and issubclass(c, BaseModel) and n.endswith("Request")]
    roots += [getattr(types, n) for n in ("AdamOptimizerConfig", "DimuonOptimizerConfig", "DimuonParams") if hasattr(types, n)]
    out, todo, seen = {}, list(roots), set()
    while todo:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        fields = {}
        for name, f in c.model_fields.items():
            fields[f.alias or name] = str(f.annotation).replace("typing.", "")
            todo.extend(models_in(f.annotation))
        out[c.__name__] = fields
    return dict(sorted(out.items()))


def proto_types():
    out, todo, seen = {}, [tinker_public_pb2.ForwardBackwardRequest.DESCRIPTOR], set()
    while todo:
        d = todo.pop()
        if d.full_name in seen or d.GetOptions().map_entry:
            continue
        seen.add(d.full_name)
        fields = {}
        for f in d.fields:
            fields[f.name] = f.number
            if f.message_type is not None:
                mt = f.message_type
                if mt.GetOptions().map_entry:
                    mt = mt.fields_by_name["value"].message_type
                if mt is not None:
                    todo.append(mt)
        out[d.name] = fields
    return dict(sorted(out.items()))


def literal_values(alias):
    return sorted(typing.get_args(alias))


def main():
    values = {"LossFnType": literal_values(types.LossFnType)}
    if hasattr(types, "SamplingClientKind"):
        values["SamplingClientKind"] = literal_values(types.SamplingClientKind)
    json.dump({"sdk_version": tinker.__version__, "json": json_types(), "protobuf": proto_types(), "values": values},
              sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
