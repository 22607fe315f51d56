// Package workerpb is the generated gRPC code of backend/workerpb/executor.proto. It is
// committed; regenerate it with protoc 3.21.12 (Debian's protobuf-compiler),
// protoc-gen-go v1.36.12 and protoc-gen-go-grpc v1.6.2:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//	go generate ./backend/workerpb
package workerpb

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative executor.proto
