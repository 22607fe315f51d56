package setup

import (
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	mux.Handle("/metrics", promhttp.Handler())
	go func() { _ = http.Serve(ln, mux) }()
	return exp, nil
}
