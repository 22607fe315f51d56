// Package tinkerpb is the generated Go code of the Tinker SDK's public protobuf schema
// (api/wire/proto/tinker_public.proto): forward_backward requests and the two binary
// result types, with the SDK's field names and numbers. It is committed; go generate
// ./api/wire regenerates it (see api/wire/gen.go).
package tinkerpb
