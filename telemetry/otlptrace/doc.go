// Package otlptrace is the span processor in front of the OTLP trace export, laid out
// like the SDK's batch span processor: defaults as named constants, the OTEL_BSP_* and
// OTEL_EXPORTER_OTLP_* variables read once in New, options over them, and Shutdown and
// ForceFlush bounded by their context.
//
// Unlike the SDK's processor it encodes each span to OTLP protobuf when the span ends
// (encode.go), so the queue is one pointer-free buffer and the export a concatenation,
// and it counts every span it drops. send.go delivers the requests over gRPC or HTTP.
package otlptrace
