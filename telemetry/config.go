package telemetry

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// Config is the telemetry block of tuft_config.yaml (spec §1).
type Config struct {
	Enabled            bool              `yaml:"enabled"`
	ServiceName        string            `yaml:"service_name"`
	OTLPEndpoint       string            `yaml:"otlp_endpoint"`
	Protocol           string            `yaml:"protocol"` // grpc | http/protobuf
	Headers            map[string]string `yaml:"headers"`
	TimeoutSeconds     float64           `yaml:"timeout_seconds"`
	SamplingRatio      float64           `yaml:"sampling_ratio"`
	Traces             SignalConfig      `yaml:"traces"`
	Metrics            MetricsConfig     `yaml:"metrics"`
	Logs               SignalConfig      `yaml:"logs"`
	Prometheus         PrometheusConfig  `yaml:"prometheus"`
	ResourceAttributes map[string]string `yaml:"resource_attributes"`
}

// SignalConfig switches one signal.
type SignalConfig struct {
	Enabled bool `yaml:"enabled"`
}

// MetricsConfig switches metrics and sets their export.
type MetricsConfig struct {
	Enabled               bool    `yaml:"enabled"`
	ExportIntervalSeconds float64 `yaml:"export_interval_seconds"`
	// ModelIDAttribute keeps model_id on the metrics that carry it (false for very many runs).
	ModelIDAttribute *bool `yaml:"model_id_attribute"`
	// CardinalityLimit is the SDK's per-instrument limit of attribute sets.
	CardinalityLimit int `yaml:"cardinality_limit"`
}

// PrometheusConfig is the optional scrape endpoint.
type PrometheusConfig struct {
	Enabled bool   `yaml:"enabled"`
	Listen  string `yaml:"listen"`
}

// DefaultConfig is telemetry off, with every signal on once enabled.
func DefaultConfig() Config {
	t := true
	return Config{
		ServiceName: "tuft", Protocol: "grpc", TimeoutSeconds: 3, SamplingRatio: 1,
		Traces: SignalConfig{Enabled: true}, Logs: SignalConfig{Enabled: true},
		Metrics:    MetricsConfig{Enabled: true, ExportIntervalSeconds: 15, ModelIDAttribute: &t, CardinalityLimit: 2000},
		Prometheus: PrometheusConfig{Listen: "127.0.0.1:9464"},
	}
}

// Validate names the first bad key of each problem.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("telemetry.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if c.ServiceName == "" {
		bad("service_name", "must not be empty")
	}
	switch c.Protocol {
	case "grpc", "http/protobuf":
	default:
		bad("protocol", "%q is not one of grpc, http/protobuf", c.Protocol)
	}
	if c.SamplingRatio < 0 || c.SamplingRatio > 1 {
		bad("sampling_ratio", "%g must be in [0, 1]", c.SamplingRatio)
	}
	// Both become time.Durations: bounded so neither can overflow (NaN fails too).
	if !(c.TimeoutSeconds > 0 && c.TimeoutSeconds <= 3600) {
		bad("timeout_seconds", "%g must be in (0, 3600]", c.TimeoutSeconds)
	}
	if !(c.Metrics.ExportIntervalSeconds > 0 && c.Metrics.ExportIntervalSeconds <= 86400) {
		bad("metrics.export_interval_seconds", "%g must be in (0, 86400]", c.Metrics.ExportIntervalSeconds)
	}
	if c.Metrics.CardinalityLimit < 0 {
		bad("metrics.cardinality_limit", "%d must not be negative", c.Metrics.CardinalityLimit)
	}
	if c.OTLPEndpoint != "" {
		if err := checkEndpoint(c.OTLPEndpoint); err != nil {
			bad("otlp_endpoint", "%v", err)
		}
	}
	if c.Prometheus.Enabled && !strings.Contains(c.Prometheus.Listen, ":") {
		bad("prometheus.listen", "%q must be host:port", c.Prometheus.Listen)
	}
	return errors.Join(errs...)
}

func checkEndpoint(ep string) error {
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return fmt.Errorf("%q is not a URL: %v", ep, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("%q: scheme must be http or https", ep)
		}
		if u.Host == "" {
			return fmt.Errorf("%q has no host", ep)
		}
		if u.User != nil {
			return fmt.Errorf("put credentials in telemetry.headers, not in the endpoint URL")
		}
		return nil
	}
	if !strings.Contains(ep, ":") {
		return fmt.Errorf("%q must be host:port or an http(s) URL", ep)
	}
	return nil
}

// Endpoint resolves where to export: the config, then TUFT_OTLP_ENDPOINT, then
// OTEL_EXPORTER_OTLP_ENDPOINT, then the protocol's default.
func (c Config) Endpoint() string {
	for _, ep := range []string{c.OTLPEndpoint, os.Getenv("TUFT_OTLP_ENDPOINT"), os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")} {
		if ep != "" {
			return ep
		}
	}
	if c.Protocol == "http/protobuf" {
		return "http://localhost:4318"
	}
	return "http://localhost:4317"
}

// ModelIDAttr reports whether metrics carry model_id (metrics.model_id_attribute, on
// unless set to false).
func (c Config) ModelIDAttr() bool {
	return c.Metrics.ModelIDAttribute == nil || *c.Metrics.ModelIDAttribute
}
