"""Writes tinker_public.proto from the protobuf schema embedded in a `tinker` wheel.

The SDK ships only generated Python (tinker/proto/tinker_public_pb2.py), which holds the
serialized FileDescriptorProto. This decodes it and prints it as .proto source, with the
Go package option added, so that `go generate ./api/wire` can build tinkerpb from it.

    pip download --no-deps tinker==0.38.0 -d /tmp/tk && (cd /tmp/tk && unzip -q *.whl)
    python3 api/wire/proto/schema_from_wheel.py /tmp/tk/tinker/proto/tinker_public_pb2.py 0.38.0 \
        > api/wire/proto/tinker_public.proto

Needs the `protobuf` Python package (any venv with the SDK has it).
"""

import ast
import sys

from google.protobuf import descriptor_pb2

FDP = descriptor_pb2.FieldDescriptorProto
SCALARS = {
    FDP.TYPE_DOUBLE: "double", FDP.TYPE_FLOAT: "float", FDP.TYPE_INT64: "int64", FDP.TYPE_UINT64: "uint64",
    FDP.TYPE_INT32: "int32", FDP.TYPE_FIXED64: "fixed64", FDP.TYPE_FIXED32: "fixed32", FDP.TYPE_BOOL: "bool",
    FDP.TYPE_STRING: "string", FDP.TYPE_BYTES: "bytes", FDP.TYPE_UINT32: "uint32", FDP.TYPE_SFIXED32: "sfixed32",
    FDP.TYPE_SFIXED64: "sfixed64", FDP.TYPE_SINT32: "sint32", FDP.TYPE_SINT64: "sint64",
}


def serialized_descriptor(path):
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile":
            return ast.literal_eval(node.args[0])
    raise SystemExit(f"{path}: no AddSerializedFile(...) call")


def type_name(f, package):
    if f.type in (FDP.TYPE_MESSAGE, FDP.TYPE_ENUM):
        n = f.type_name.lstrip(".")
        return n[len(package) + 1:] if n.startswith(package + ".") else n
    return SCALARS[f.type]


def render_message(m, package, indent, out):
    pad = "  " * indent
    out.append(f"{pad}message {m.name} {{")
    maps = {n.name: n for n in m.nested_type if n.options.map_entry}
    for n in m.nested_type:
        if not n.options.map_entry:
            render_message(n, package, indent + 1, out)
    for e in m.enum_type:
        render_enum(e, indent + 1, out)
    real_oneofs = {}
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            real_oneofs.setdefault(f.oneof_index, []).append(f)
    done_oneofs = set()
    for f in m.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            if f.oneof_index in done_oneofs:
                continue
            done_oneofs.add(f.oneof_index)
            out.append(f"{pad}  oneof {m.oneof_decl[f.oneof_index].name} {{")
            for g in real_oneofs[f.oneof_index]:
                out.append(f"{pad}    {type_name(g, package)} {g.name} = {g.number};")
            out.append(f"{pad}  }}")
            continue
        entry = maps.get(f.type_name.rsplit(".", 1)[-1]) if f.type == FDP.TYPE_MESSAGE else None
        if entry is not None and f.label == FDP.LABEL_REPEATED:
            k, v = entry.field[0], entry.field[1]
            out.append(f"{pad}  map<{type_name(k, package)}, {type_name(v, package)}> {f.name} = {f.number};")
            continue
        label = ""
        if f.label == FDP.LABEL_REPEATED:
            label = "repeated "
        elif f.proto3_optional:
            label = "optional "
        out.append(f"{pad}  {label}{type_name(f, package)} {f.name} = {f.number};")
    out.append(f"{pad}}}")
    out.append("")


def render_enum(e, indent, out):
    pad = "  " * indent
    out.append(f"{pad}enum {e.name} {{")
    for v in e.value:
        out.append(f"{pad}  {v.name} = {v.number};")
    out.append(f"{pad}}}")
    out.append("")


def main():
    path, version = sys.argv[1], sys.argv[2]
    fd = descriptor_pb2.FileDescriptorProto.FromString(serialized_descriptor(path))
    if fd.syntax != "proto3":
        raise SystemExit(f"unexpected syntax {fd.syntax!r}")
    out = [
        f"// The Tinker SDK's public protobuf schema (package {fd.package}), decoded from the",
        f"// tinker {version} wheel (tinker/proto/tinker_public_pb2.py) by schema_from_wheel.py.",
        "// Field names and numbers are the SDK's; do not edit by hand. All packed arrays are",
        "// raw little-endian bytes.",
        'syntax = "proto3";',
        "",
        f"package {fd.package};",
        "",
        'option go_package = "github.com/tuft-go/tuft/api/wire/tinkerpb";',
        "",
    ]
    for e in fd.enum_type:
        render_enum(e, 0, out)
    for m in fd.message_type:
        render_message(m, fd.package, 0, out)
    sys.stdout.write("\n".join(out).rstrip() + "\n")


if __name__ == "__main__":
    main()
