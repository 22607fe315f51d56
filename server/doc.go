// Package server is the API process's composition root: Start assembles a running TuFT
// API server from a config (store, models or workers, futures, backend, service and the
// HTTP API, each handed the process's telemetry providers) and Shutdown takes it down in
// order. cmd/tuft calls it; integration tests call it in process. The worker process has
// its own root, worker.Start.
package server
