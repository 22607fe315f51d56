// Package httpserver is the HTTP server side of the telemetry contract: a middleware that
// traces every request under its route pattern, continues an incoming trace and records
// http.server.request.duration.
package httpserver
