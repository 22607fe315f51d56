package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/bridges/otelslog"
	otelruntime "go.opentelemetry.io/contrib/instrumentation/runtime"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutlog"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/log/global"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Telemetry owns the providers of one process.
type Telemetry struct {
	cfg      Config
	logger   *slog.Logger
	tp       *sdktrace.TracerProvider
	mp       *sdkmetric.MeterProvider
	lp       *sdklog.LoggerProvider
	gauges   *resourceGauges
	dropped  *dropCounter
	shutOnce sync.Once
}

type options struct {
	logLevel   string
	logWriter  io.Writer
	jsonLogs   bool
	version    string
	spanProcs  []sdktrace.SpanProcessor
	readers    []sdkmetric.Reader
	logProcs   []sdklog.Processor
	forceLocal bool
}

// Option adjusts Setup.
type Option func(*options)

// WithLogLevel sets the local log level (debug, info, warn, error).
func WithLogLevel(l string) Option { return func(o *options) { o.logLevel = l } }

// WithLogWriter sends the local log lines to w (default stderr).
func WithLogWriter(w io.Writer) Option { return func(o *options) { o.logWriter = w } }

// WithJSONLogs writes local log lines as JSON.
func WithJSONLogs() Option { return func(o *options) { o.jsonLogs = true } }

// WithVersion sets service.version.
func WithVersion(v string) Option { return func(o *options) { o.version = v } }

// WithSpanProcessor adds a span processor (tests: a tracetest.SpanRecorder). It enables
// tracing even without an exporter.
func WithSpanProcessor(p sdktrace.SpanProcessor) Option {
	return func(o *options) { o.spanProcs = append(o.spanProcs, p); o.forceLocal = true }
}

// WithMetricReader adds a metric reader (tests: a ManualReader).
func WithMetricReader(r sdkmetric.Reader) Option {
	return func(o *options) { o.readers = append(o.readers, r); o.forceLocal = true }
}

// WithLogProcessor adds a log record processor (tests).
func WithLogProcessor(p sdklog.Processor) Option {
	return func(o *options) { o.logProcs = append(o.logProcs, p); o.forceLocal = true }
}

func parseLevel(s string) slog.Level {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Queue sizes of the span and log processors: a few seconds of a busy control plane's
// spans, so a slow export round does not drop them. The log queue is smaller because
// the SDK keeps it as an array of full records (about 2.5 KiB each) that the garbage
// collector scans on every cycle, and logs come at a small fraction of the span rate.
const (
	spanQueueSize = 32768
	spanBatchSize = 2048
	logQueueSize  = 2048
)

// batchSettings are the span processor's sizes: the defaults above, or the standard
// OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE and OTEL_BSP_SCHEDULE_DELAY
// (milliseconds) variables.
type batchSettings struct {
	queue, batch int
	delay        time.Duration
}

func batchSettingsFromEnv() (batchSettings, error) {
	bs := batchSettings{queue: spanQueueSize, batch: spanBatchSize, delay: 2 * time.Second}
	for _, v := range []struct {
		key string
		set func(int)
	}{
		{"OTEL_BSP_MAX_QUEUE_SIZE", func(n int) { bs.queue = n }},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", func(n int) { bs.batch = n }},
		{"OTEL_BSP_SCHEDULE_DELAY", func(n int) { bs.delay = time.Duration(n) * time.Millisecond }},
	} {
		raw := strings.TrimSpace(os.Getenv(v.key))
		if raw == "" {
			continue
		}
		n, err := strconv.Atoi(raw)
		if err != nil || n <= 0 {
			return bs, fmt.Errorf("telemetry: %s=%q is not a positive integer", v.key, raw)
		}
		v.set(n)
	}
	bs.batch = min(bs.batch, bs.queue)
	return bs, nil
}

// Setup installs the global providers, propagator and logger for one process (role
// "server" or "worker"). With telemetry disabled it installs no exporter and starts no
// goroutine, but still sets the W3C propagator and the local logger.
func Setup(ctx context.Context, cfg Config, role string, opts ...Option) (*Telemetry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := options{logWriter: os.Stderr, version: "dev"}
	for _, f := range opts {
		f(&o)
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	// The SDK's own errors go to stderr, rate-limited, never into slog: a failing log
	// exporter must not feed itself.
	otel.SetErrorHandler(newStderrErrorHandler())
	t := &Telemetry{cfg: cfg, dropped: &dropCounter{}}
	local := newLocalHandler(o.logWriter, parseLevel(o.logLevel), o.jsonLogs)
	if !cfg.Enabled && !o.forceLocal {
		// Explicit no-op providers: cheaper per span than the global delegates.
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
		otel.SetMeterProvider(metricnoop.NewMeterProvider())
		active.Store(false)
		t.logger = slog.New(local)
		slog.SetDefault(t.logger)
		SetMetrics(NewInstruments(otel.GetMeterProvider(), cfg.modelIDAttr()))
		return t, nil
	}
	active.Store(true)
	res, err := newResource(ctx, cfg, role, o.version)
	if err != nil {
		return nil, err
	}
	debug := os.Getenv("TUFT_OTEL_DEBUG") == "1"
	timeout := time.Duration(cfg.TimeoutSeconds * float64(time.Second))
	ep := cfg.Endpoint()

	// Traces.
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SamplingRatio)))}
	for _, p := range o.spanProcs {
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(p))
	}
	if cfg.Enabled && cfg.Traces.Enabled {
		if debug {
			exp, err := stdouttrace.New(stdouttrace.WithWriter(os.Stdout))
			if err != nil {
				return nil, fmt.Errorf("telemetry: console trace exporter: %w", err)
			}
			tpOpts = append(tpOpts, sdktrace.WithSyncer(exp))
		} else {
			bs, err := batchSettingsFromEnv()
			if err != nil {
				return nil, err
			}
			send, err := newSpanSender(cfg, ep)
			if err != nil {
				return nil, err
			}
			tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(newSpanBatcher(send, t.dropped,
				bs.queue, bs.batch, bs.delay, timeout)))
		}
	}
	t.tp = sdktrace.NewTracerProvider(tpOpts...)
	otel.SetTracerProvider(&sampledProvider{sdk: t.tp, neverRoot: cfg.SamplingRatio <= 0})

	// Metrics.
	mpOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithCardinalityLimit(cfg.Metrics.CardinalityLimit)}
	for _, r := range o.readers {
		mpOpts = append(mpOpts, sdkmetric.WithReader(r))
	}
	if cfg.Enabled && cfg.Metrics.Enabled {
		var exp sdkmetric.Exporter
		if debug {
			exp, err = stdoutmetric.New(stdoutmetric.WithWriter(os.Stdout))
		} else {
			exp, err = metricExporter(ctx, cfg, ep, timeout)
		}
		if err != nil {
			return nil, fmt.Errorf("telemetry: metric exporter: %w", err)
		}
		interval := time.Duration(cfg.Metrics.ExportIntervalSeconds * float64(time.Second))
		mpOpts = append(mpOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(interval), sdkmetric.WithTimeout(timeout))))
		if cfg.Prometheus.Enabled {
			r, err := startPrometheus(cfg.Prometheus.Listen)
			if err != nil {
				return nil, err
			}
			mpOpts = append(mpOpts, sdkmetric.WithReader(r))
		}
	}
	t.mp = sdkmetric.NewMeterProvider(mpOpts...)
	otel.SetMeterProvider(t.mp)
	SetMetrics(NewInstruments(t.mp, cfg.modelIDAttr()))
	if cfg.Enabled && cfg.Metrics.Enabled {
		if err := otelruntime.Start(otelruntime.WithMeterProvider(t.mp)); err != nil {
			return nil, fmt.Errorf("telemetry: runtime metrics: %w", err)
		}
		t.gauges, err = startResourceGauges(t.mp)
		if err != nil {
			return nil, err
		}
	}

	// Logs.
	lpOpts := []sdklog.LoggerProviderOption{sdklog.WithResource(res)}
	for _, p := range o.logProcs {
		lpOpts = append(lpOpts, sdklog.WithProcessor(p))
	}
	if cfg.Enabled && cfg.Logs.Enabled {
		var exp sdklog.Exporter
		if debug {
			exp, err = stdoutlog.New(stdoutlog.WithWriter(os.Stdout))
		} else {
			exp, err = logExporter(ctx, cfg, ep, timeout)
		}
		if err != nil {
			return nil, fmt.Errorf("telemetry: log exporter: %w", err)
		}
		lpOpts = append(lpOpts, sdklog.WithProcessor(sdklog.NewBatchProcessor(t.dropped.logs(exp),
			sdklog.WithMaxQueueSize(logQueueSize), sdklog.WithExportTimeout(timeout))))
	}
	t.lp = sdklog.NewLoggerProvider(lpOpts...)
	global.SetLoggerProvider(t.lp)
	bridge := otelslog.NewHandler("tuft", otelslog.WithLoggerProvider(t.lp))
	t.logger = slog.New(fanout{local, levelGate{bridge, parseLevel(o.logLevel)}})
	slog.SetDefault(t.logger)
	return t, nil
}

func newResource(ctx context.Context, cfg Config, role, version string) (*resource.Resource, error) {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	attrs := []attribute.KeyValue{
		semconv.ServiceName(cfg.ServiceName), semconv.ServiceVersion(version),
		semconv.ServiceInstanceID(hex.EncodeToString(id)), attribute.String(AttrRole, role),
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

func hasScheme(ep string) bool { return strings.Contains(ep, "://") }

func metricExporter(ctx context.Context, cfg Config, ep string, timeout time.Duration) (sdkmetric.Exporter, error) {
	if cfg.Protocol == "http/protobuf" {
		o := []otlpmetrichttp.Option{otlpmetrichttp.WithHeaders(cfg.Headers), otlpmetrichttp.WithTimeout(timeout),
			otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{Enabled: true, InitialInterval: time.Second, MaxInterval: 5 * time.Second, MaxElapsedTime: 10 * time.Second})}
		if hasScheme(ep) {
			o = append(o, otlpmetrichttp.WithEndpointURL(ep))
		} else {
			o = append(o, otlpmetrichttp.WithEndpoint(ep), otlpmetrichttp.WithInsecure())
		}
		return otlpmetrichttp.New(ctx, o...)
	}
	o := []otlpmetricgrpc.Option{otlpmetricgrpc.WithHeaders(cfg.Headers), otlpmetricgrpc.WithTimeout(timeout),
		otlpmetricgrpc.WithRetry(otlpmetricgrpc.RetryConfig{Enabled: true, InitialInterval: time.Second, MaxInterval: 5 * time.Second, MaxElapsedTime: 10 * time.Second})}
	if hasScheme(ep) {
		o = append(o, otlpmetricgrpc.WithEndpointURL(ep))
	} else {
		o = append(o, otlpmetricgrpc.WithEndpoint(ep), otlpmetricgrpc.WithInsecure())
	}
	return otlpmetricgrpc.New(ctx, o...)
}

func logExporter(ctx context.Context, cfg Config, ep string, timeout time.Duration) (sdklog.Exporter, error) {
	if cfg.Protocol == "http/protobuf" {
		o := []otlploghttp.Option{otlploghttp.WithHeaders(cfg.Headers), otlploghttp.WithTimeout(timeout),
			otlploghttp.WithRetry(otlploghttp.RetryConfig{Enabled: true, InitialInterval: time.Second, MaxInterval: 5 * time.Second, MaxElapsedTime: 10 * time.Second})}
		if hasScheme(ep) {
			o = append(o, otlploghttp.WithEndpointURL(ep))
		} else {
			o = append(o, otlploghttp.WithEndpoint(ep), otlploghttp.WithInsecure())
		}
		return otlploghttp.New(ctx, o...)
	}
	o := []otlploggrpc.Option{otlploggrpc.WithHeaders(cfg.Headers), otlploggrpc.WithTimeout(timeout),
		otlploggrpc.WithRetry(otlploggrpc.RetryConfig{Enabled: true, InitialInterval: time.Second, MaxInterval: 5 * time.Second, MaxElapsedTime: 10 * time.Second})}
	if hasScheme(ep) {
		o = append(o, otlploggrpc.WithEndpointURL(ep))
	} else {
		o = append(o, otlploggrpc.WithEndpoint(ep), otlploggrpc.WithInsecure())
	}
	return otlploggrpc.New(ctx, o...)
}

// Logger is the process logger: the local handler plus the OpenTelemetry bridge.
func (t *Telemetry) Logger() *slog.Logger { return t.logger }

// Dropped returns how many spans and log records could not be exported.
// Spans count both export failures and spans dropped on a full queue.
func (t *Telemetry) Dropped() (spans, logs int64) {
	return t.dropped.s.Load() + t.dropped.queueFull.Load(), t.dropped.l.Load()
}

// ForceFlush exports everything buffered.
func (t *Telemetry) ForceFlush(ctx context.Context) error {
	var errs []error
	if t.tp != nil {
		errs = append(errs, t.tp.ForceFlush(ctx))
	}
	if t.mp != nil {
		errs = append(errs, t.mp.ForceFlush(ctx))
	}
	if t.lp != nil {
		errs = append(errs, t.lp.ForceFlush(ctx))
	}
	return errors.Join(errs...)
}

// Shutdown flushes and stops the three providers in parallel under ctx's one deadline,
// so a dead collector cannot make one signal eat the others' time.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var err error
	t.shutOnce.Do(func() {
		if t.gauges != nil {
			t.gauges.stop()
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		run := func(f func(context.Context) error) {
			defer wg.Done()
			if e := f(ctx); e != nil {
				mu.Lock()
				errs = append(errs, e)
				mu.Unlock()
			}
		}
		if t.tp != nil {
			wg.Add(1)
			go run(t.tp.Shutdown)
		}
		if t.mp != nil {
			wg.Add(1)
			go run(t.mp.Shutdown)
		}
		if t.lp != nil {
			wg.Add(1)
			go run(t.lp.Shutdown)
		}
		wg.Wait()
		err = errors.Join(errs...)
		if s, l := t.Dropped(); s+l > 0 {
			fmt.Fprintf(os.Stderr, "telemetry: %d spans and %d log records could not be exported\n", s, l)
		}
	})
	return err
}

// stderrErrorHandler prints the SDK's errors, at most one line per second.
type stderrErrorHandler struct {
	last       atomic.Int64
	suppressed atomic.Int64
}

func newStderrErrorHandler() *stderrErrorHandler { return &stderrErrorHandler{} }

func (h *stderrErrorHandler) Handle(err error) {
	now := time.Now().UnixNano()
	last := h.last.Load()
	if now-last < int64(time.Second) || !h.last.CompareAndSwap(last, now) {
		h.suppressed.Add(1)
		return
	}
	n := h.suppressed.Swap(0)
	if n > 0 {
		fmt.Fprintf(os.Stderr, "telemetry: export error: %v (%d more suppressed)\n", err, n)
		return
	}
	fmt.Fprintf(os.Stderr, "telemetry: export error: %v\n", err)
}
