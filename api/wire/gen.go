package wire

// The generated code in tinkerpb is committed. Regenerate it with protoc 3.21.12
// (Debian's protobuf-compiler) and protoc-gen-go v1.36.12
// (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12):
//go:generate protoc --proto_path=proto --go_out=tinkerpb --go_opt=paths=source_relative proto/tinker_public.proto
