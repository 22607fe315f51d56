// Package worker is the `tuft worker` process: it hosts base models and their adapters
// (an in-process backend.Executor) and serves them over gRPC to `tuft launch` replicas.
// Start and Shutdown are the process's composition root, as server.Start and Shutdown
// are the API process's; NewServer and Service are the gRPC side on their own. Trace
// context arrives with every call (otelgrpc), so the model spans opened here are
// descendants of the API server's backend spans in one trace.
//
// The worker does not touch the store: it publishes its registration through the
// Publisher its caller hands it (package registry over the shared store).
package worker
