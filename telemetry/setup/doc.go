// Package setup builds a process's telemetry from the config's telemetry block: the
// resource, the tracer, meter and logger providers with their exporters (our OTLP span
// processor, the OTLP metric and log exporters, console exporters under
// TUFT_OTEL_DEBUG=1, the optional Prometheus endpoint), the resource gauges, Go runtime
// metrics and the slog bridge.
//
// New returns the providers and installs nothing: the process's main calls
// Telemetry.InstallGlobal (or hands Telemetry.Options to its components), and
// Telemetry.Shutdown flushes every signal under one deadline on exit.
package setup
