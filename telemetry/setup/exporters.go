package setup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutlog"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/tuft-go/tuft/telemetry"
	"github.com/tuft-go/tuft/telemetry/otlptrace"
)

// target is where and how every signal is exported: one endpoint, the config's headers,
// the per-export timeout and the retry policy of the OTLP exporters.
type target struct {
	endpoint string
	url      bool // an http(s) URL, not host:port (which is plain text)
	headers  map[string]string
	timeout  time.Duration
	retry    retryConfig
}

// retryConfig has the fields, in order, of each OTLP exporter package's RetryConfig, so
// one value converts to every package's type.
type retryConfig struct {
	Enabled         bool
	InitialInterval time.Duration
	MaxInterval     time.Duration
	MaxElapsedTime  time.Duration
}

func newTarget(cfg telemetry.Config, timeout time.Duration) target {
	ep := cfg.Endpoint()
	return target{endpoint: ep, url: strings.Contains(ep, "://"), headers: cfg.Headers, timeout: timeout,
		retry: retryConfig{Enabled: true, InitialInterval: time.Second, MaxInterval: 5 * time.Second, MaxElapsedTime: 10 * time.Second}}
}

// otlpOptions spells the target in one exporter package's option types (each OTLP
// exporter package has its own, with the same meaning).
func otlpOptions[O any](t target, url, hostPort func(string) O, insecure func() O,
	headers func(map[string]string) O, timeout func(time.Duration) O, retry O) []O {
	o := []O{headers(t.headers), timeout(t.timeout), retry}
	if t.url {
		return append(o, url(t.endpoint))
	}
	return append(o, hostPort(t.endpoint), insecure())
}

// exporters builds the metric and log exporters of each protocol. (Traces go through our
// own processor, telemetry/otlptrace.)
var exporters = map[string]struct {
	metric func(context.Context, target) (sdkmetric.Exporter, error)
	log    func(context.Context, target) (sdklog.Exporter, error)
}{
	otlptrace.ProtocolGRPC: {
		metric: func(ctx context.Context, t target) (sdkmetric.Exporter, error) {
			return otlpmetricgrpc.New(ctx, otlpOptions(t, otlpmetricgrpc.WithEndpointURL, otlpmetricgrpc.WithEndpoint,
				otlpmetricgrpc.WithInsecure, otlpmetricgrpc.WithHeaders, otlpmetricgrpc.WithTimeout,
				otlpmetricgrpc.WithRetry(otlpmetricgrpc.RetryConfig(t.retry)))...)
		},
		log: func(ctx context.Context, t target) (sdklog.Exporter, error) {
			return otlploggrpc.New(ctx, otlpOptions(t, otlploggrpc.WithEndpointURL, otlploggrpc.WithEndpoint,
				otlploggrpc.WithInsecure, otlploggrpc.WithHeaders, otlploggrpc.WithTimeout,
				otlploggrpc.WithRetry(otlploggrpc.RetryConfig(t.retry)))...)
		},
	},
	otlptrace.ProtocolHTTP: {
		metric: func(ctx context.Context, t target) (sdkmetric.Exporter, error) {
			return otlpmetrichttp.New(ctx, otlpOptions(t, otlpmetrichttp.WithEndpointURL, otlpmetrichttp.WithEndpoint,
				otlpmetrichttp.WithInsecure, otlpmetrichttp.WithHeaders, otlpmetrichttp.WithTimeout,
				otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig(t.retry)))...)
		},
		log: func(ctx context.Context, t target) (sdklog.Exporter, error) {
			return otlploghttp.New(ctx, otlpOptions(t, otlploghttp.WithEndpointURL, otlploghttp.WithEndpoint,
				otlploghttp.WithInsecure, otlploghttp.WithHeaders, otlploghttp.WithTimeout,
				otlploghttp.WithRetry(otlploghttp.RetryConfig(t.retry)))...)
		},
	},
}

// traceProcessor is the console exporter (debug) or our OTLP span processor.
func traceProcessor(debug bool, console io.Writer, cfg telemetry.Config, t target, onErr func(error)) (sdktrace.SpanProcessor, error) {
	if debug {
		exp, err := stdouttrace.New(stdouttrace.WithWriter(console))
		if err != nil {
			return nil, fmt.Errorf("telemetry: console trace exporter: %w", err)
		}
		return sdktrace.NewSimpleSpanProcessor(exp), nil
	}
	return otlptrace.New(otlptrace.WithEndpoint(t.endpoint), otlptrace.WithProtocol(cfg.Protocol),
		otlptrace.WithHeaders(t.headers), otlptrace.WithExportTimeout(t.timeout), otlptrace.WithErrorHandler(onErr))
}

// metricExporter is the console exporter (debug) or the protocol's OTLP exporter.
func metricExporter(ctx context.Context, debug bool, console io.Writer, protocol string, t target) (sdkmetric.Exporter, error) {
	if debug {
		return stdoutmetric.New(stdoutmetric.WithWriter(console))
	}
	return exporters[protocol].metric(ctx, t)
}

// logExporter is the console exporter (debug) or the protocol's OTLP exporter.
func logExporter(ctx context.Context, debug bool, console io.Writer, protocol string, t target) (sdklog.Exporter, error) {
	if debug {
		return stdoutlog.New(stdoutlog.WithWriter(console))
	}
	return exporters[protocol].log(ctx, t)
}

// newResource describes the process (spec §2): service name, version and instance, host,
// pid, the configured attributes and tuft.role.
func newResource(ctx context.Context, cfg telemetry.Config, role, version string) (*resource.Resource, error) {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	attrs := []attribute.KeyValue{
		semconv.ServiceName(cfg.ServiceName), semconv.ServiceVersion(version),
		semconv.ServiceInstanceID(hex.EncodeToString(id)), attribute.String(telemetry.AttrRole, role),
	}
	for k, v := range cfg.ResourceAttributes {
		attrs = append(attrs, attribute.String(k, v))
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(),
		resource.WithProcessPID(), resource.WithSchemaURL(semconv.SchemaURL), resource.WithAttributes(attrs...))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	return res, nil
}
