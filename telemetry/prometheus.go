package telemetry

import (
	"fmt"
	"net"
	"net/http"

	promexp "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// startPrometheus serves the metrics on listen/metrics for scraping, beside OTLP push.
func startPrometheus(listen string) (sdkmetric.Reader, error) {
	exp, err := promexp.New()
	if err != nil {
		return nil, fmt.Errorf("telemetry.prometheus: %w", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("telemetry.prometheus.listen %s: %w", listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promHandler())
	go func() { _ = http.Serve(ln, mux) }()
	return exp, nil
}
