package wire

// The generated code in tinkerpb is committed. proto/tinker_public.proto is the SDK's own
// schema, decoded from the tinker 0.38.0 wheel by proto/schema_from_wheel.py (see its
// docstring). Regenerate tinkerpb with protoc 3.21.12 (Debian's protobuf-compiler) and
// protoc-gen-go v1.36.12 (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12):
//go:generate protoc --proto_path=proto --go_out=tinkerpb --go_opt=paths=source_relative proto/tinker_public.proto
