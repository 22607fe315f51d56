// Package telemetry is the project's observability vocabulary: every span, attribute and
// metric name of the contract (names.go), the correlation keys that travel in a context
// (keys.go), the typed metric Instruments, the request-slice helper, the W3C propagator
// with Inject/Extract, the telemetry config schema, and the Options by which instrumented
// components take their providers.
//
// It depends only on the OpenTelemetry API, so config, store, futures and the client may
// import it without pulling in an SDK, an exporter, gRPC or Prometheus. The wiring lives
// in subpackages that only a process's composition root imports:
//   - telemetry/setup: providers, resource, exporters, Prometheus, resource gauges, the
//     slog bridge, ForceFlush and Shutdown;
//   - telemetry/otlptrace: the OTLP span processor (encode at span end, batch, send);
//   - telemetry/httpserver: the HTTP server middleware.
package telemetry
