// Package client is the Go client SDK of TuFT (and of any Tinker-compatible server):
// service, training, sampling and REST clients in the spirit of the Tinker Python SDK.
// Operations return futures; a training client numbers its operations with ordered
// seq_ids so they can be pipelined (submit the next step before reading the last);
// requests are retried with backoff that honours Retry-After; results are long-polled.
// OpenTelemetry spans and traceparent propagation are available, off by default.
//
// Data and results are the Tinker types of package api/wire (wire.Datum with
// wire.Tensor loss inputs; wire.ForwardBackwardOutput; wire.SampleResponse): the client
// depends on api/wire, protobuf and OpenTelemetry's API, never on TuFT's engine.
package client
