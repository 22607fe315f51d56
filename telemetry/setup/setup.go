package setup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/bridges/otelslog"
	otelruntime "go.opentelemetry.io/contrib/instrumentation/runtime"
	"go.opentelemetry.io/otel"
	otellog "go.opentelemetry.io/otel/log"
	lognoop "go.opentelemetry.io/otel/log/noop"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/tuft-go/tuft/telemetry"
	"github.com/tuft-go/tuft/telemetry/otlptrace"
)

// Telemetry owns the providers of one process. New builds them; the process's main
// decides whether to install them as the OTel globals (InstallGlobal) or to hand them to
// its components (Options), and shuts them down on exit.
type Telemetry struct {
	cfg     telemetry.Config
	enabled bool
	logger  *slog.Logger
	errs    *stderrErrorHandler
	tp      trace.TracerProvider // the sampled wrapper, or a no-op provider
	sdkTP   *sdktrace.TracerProvider
	mp      *sdkmetric.MeterProvider
	lp      *sdklog.LoggerProvider
	ins     *telemetry.Instruments
	gauges  *resourceGauges
	spans   *otlptrace.Processor
	logDrop *logDrops
	// sessionSpans receives the session spans (WithSessionSpans; nil without).
	sessionSpans *telemetry.SpanSink
	once         sync.Once
	err          error
}

type options struct {
	logLevel   string
	logWriter  io.Writer
	console    io.Writer
	jsonLogs   bool
	version    string
	spanProcs  []sdktrace.SpanProcessor
	readers    []sdkmetric.Reader
	logProcs   []sdklog.Processor
	forceLocal bool
	// sessionSpans: WithSessionSpans's sink.
	sessionSpans *telemetry.SpanSink
}

// Option adjusts New.
type Option func(*options)

// WithLogLevel sets the local log level (debug, info, warn, error).
func WithLogLevel(l string) Option { return func(o *options) { o.logLevel = l } }

// WithLogWriter sends the local log lines to w (default stderr).
func WithLogWriter(w io.Writer) Option { return func(o *options) { o.logWriter = w } }

// WithConsoleWriter sends the console exporters' output (TUFT_OTEL_DEBUG=1) to w
// (default stdout).
func WithConsoleWriter(w io.Writer) Option { return func(o *options) { o.console = w } }

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

// logQueueSize is the log processor's queue. It is smaller than the span queue because
// the SDK keeps it as an array of full records (about 2.5 KiB each) that the garbage
// collector scans on every cycle, and logs come at a small fraction of the span rate.
const logQueueSize = 2048

// gaugeInterval is how often the resource gauges sample /proc, cgroups and NVML.
const gaugeInterval = 5 * time.Second

// New builds the providers and the logger of one process (role "server" or "worker")
// from cfg. It installs nothing globally: see InstallGlobal. With telemetry disabled it
// builds no exporter and starts no goroutine; the providers are no-ops and the logger is
// the local handler alone.
func New(ctx context.Context, cfg telemetry.Config, role string, opts ...Option) (*Telemetry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := options{logWriter: os.Stderr, console: os.Stdout, version: "dev"}
	for _, f := range opts {
		f(&o)
	}
	t := &Telemetry{cfg: cfg, errs: &stderrErrorHandler{w: os.Stderr}, logDrop: &logDrops{}, sessionSpans: o.sessionSpans}
	local := newLocalHandler(o.logWriter, parseLevel(o.logLevel), o.jsonLogs)
	if !cfg.Enabled && !o.forceLocal {
		// Explicit no-op providers: cheaper per span than the global delegates, and
		// recognisable, so the HTTP middleware can step aside.
		t.tp = tracenoop.NewTracerProvider()
		t.ins = telemetry.NewInstruments(metricnoop.NewMeterProvider(), cfg.ModelIDAttr())
		t.logger = slog.New(local)
		return t, nil
	}
	t.enabled = true
	ok := false
	defer func() {
		if !ok { // release what was started before the failure
			_ = t.Shutdown(context.WithoutCancel(ctx))
		}
	}()
	res, err := newResource(ctx, cfg, role, o.version)
	if err != nil {
		return nil, err
	}
	debug := os.Getenv("TUFT_OTEL_DEBUG") == "1"
	timeout := seconds(cfg.TimeoutSeconds)
	target := newTarget(cfg, timeout)

	// Traces.
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SamplingRatio)))}
	for _, p := range o.spanProcs {
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(p))
	}
	if cfg.Enabled && cfg.Traces.Enabled {
		p, err := traceProcessor(debug, o.console, cfg, target, t.errs.Handle)
		if err != nil {
			return nil, err
		}
		if bp, ok := p.(*otlptrace.Processor); ok {
			t.spans = bp
		}
		tpOpts = append(tpOpts, sdktrace.WithSpanProcessor(p))
	}
	t.sdkTP = sdktrace.NewTracerProvider(tpOpts...)
	t.tp = &sampledProvider{sdk: t.sdkTP, neverRoot: cfg.SamplingRatio <= 0}

	// Metrics.
	mpOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithCardinalityLimit(cfg.Metrics.CardinalityLimit)}
	for _, r := range o.readers {
		mpOpts = append(mpOpts, sdkmetric.WithReader(r))
	}
	if cfg.Enabled && cfg.Metrics.Enabled {
		exp, err := metricExporter(ctx, debug, o.console, cfg.Protocol, target)
		if err != nil {
			return nil, fmt.Errorf("telemetry: metric exporter: %w", err)
		}
		mpOpts = append(mpOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp,
			sdkmetric.WithInterval(seconds(cfg.Metrics.ExportIntervalSeconds)), sdkmetric.WithTimeout(timeout))))
		if cfg.Prometheus.Enabled {
			r, err := startPrometheus(cfg.Prometheus.Listen)
			if err != nil {
				return nil, err
			}
			mpOpts = append(mpOpts, sdkmetric.WithReader(r))
		}
	}
	t.mp = sdkmetric.NewMeterProvider(mpOpts...)
	t.ins = telemetry.NewInstruments(t.mp, cfg.ModelIDAttr())
	if cfg.Enabled && cfg.Metrics.Enabled {
		if err := otelruntime.Start(otelruntime.WithMeterProvider(t.mp)); err != nil {
			return nil, fmt.Errorf("telemetry: runtime metrics: %w", err)
		}
		t.gauges, err = startResourceGauges(t.mp, gaugeInterval, nil)
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
		exp, err := logExporter(ctx, debug, o.console, cfg.Protocol, target)
		if err != nil {
			return nil, fmt.Errorf("telemetry: log exporter: %w", err)
		}
		lpOpts = append(lpOpts, sdklog.WithProcessor(sdklog.NewBatchProcessor(t.logDrop.wrap(exp),
			sdklog.WithMaxQueueSize(logQueueSize), sdklog.WithExportTimeout(timeout))))
	}
	t.lp = sdklog.NewLoggerProvider(lpOpts...)
	bridge := otelslog.NewHandler(telemetry.MeterTuft, otelslog.WithLoggerProvider(t.lp))
	t.logger = slog.New(fanout{local, levelGate{bridge, parseLevel(o.logLevel)}})
	ok = true
	return t, nil
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// InstallGlobal makes t the process's telemetry: the OTel global tracer, meter and logger
// providers, propagator and error handler, slog's default logger and telemetry.Metrics.
// Only a process's main calls it; tests hand providers to components instead.
func (t *Telemetry) InstallGlobal() {
	otel.SetTextMapPropagator(telemetry.Propagator())
	// The SDK's own errors go to stderr, rate-limited, never into slog: a failing log
	// exporter must not feed itself.
	otel.SetErrorHandler(t.errs)
	otel.SetTracerProvider(t.tp)
	otel.SetMeterProvider(t.MeterProvider())
	otel.SetLoggerProvider(t.LoggerProvider())
	telemetry.SetMetrics(t.ins)
	slog.SetDefault(t.logger)
}

// Enabled reports whether telemetry is on (an exporter or a test recorder is attached).
func (t *Telemetry) Enabled() bool { return t.enabled }

// TracerProvider is the process's tracer provider (a no-op one when disabled).
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tp }

// MeterProvider is the process's meter provider (a no-op one when disabled).
func (t *Telemetry) MeterProvider() metric.MeterProvider {
	if t.mp == nil {
		return metricnoop.NewMeterProvider()
	}
	return t.mp
}

// LoggerProvider is the process's OTel logger provider (a no-op one when disabled).
func (t *Telemetry) LoggerProvider() otellog.LoggerProvider {
	if t.lp == nil {
		return lognoop.NewLoggerProvider()
	}
	return t.lp
}

// Instruments are the contract's metric instruments on the meter provider, with
// telemetry.metrics.model_id_attribute applied.
func (t *Telemetry) Instruments() *telemetry.Instruments { return t.ins }

// Options hands t's providers to an instrumented component.
func (t *Telemetry) Options() []telemetry.Option {
	return []telemetry.Option{telemetry.WithTracerProvider(t.tp), telemetry.WithMeterProvider(t.MeterProvider()),
		telemetry.WithInstruments(t.ins)}
}

// Logger is the process logger: the local handler plus the OpenTelemetry bridge.
func (t *Telemetry) Logger() *slog.Logger { return t.logger }

// Dropped returns how many spans and log records could not be exported. Spans count both
// export failures and spans dropped on a full queue.
func (t *Telemetry) Dropped() (spans, logs int64) {
	if t.spans != nil {
		full, failed := t.spans.Dropped()
		spans = full + failed
	}
	return spans, t.logDrop.n.Load()
}

// ForceFlush exports everything buffered.
func (t *Telemetry) ForceFlush(ctx context.Context) error {
	var errs []error
	if t.sdkTP != nil {
		errs = append(errs, t.sdkTP.ForceFlush(ctx))
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
// so a dead collector cannot make one signal eat the others' time. The resource gauges
// stop only after the meter provider's final collection, which therefore includes them
// (a run shorter than one export interval still reports its resource use).
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.once.Do(func() {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		run := func(f func(context.Context) error) {
			wg.Go(func() {
				if e := f(ctx); e != nil {
					mu.Lock()
					errs = append(errs, e)
					mu.Unlock()
				}
			})
		}
		if t.sdkTP != nil {
			run(t.sdkTP.Shutdown)
		}
		if t.mp != nil {
			run(t.mp.Shutdown)
		}
		if t.lp != nil {
			run(t.lp.Shutdown)
		}
		wg.Wait()
		if t.gauges != nil {
			t.gauges.stop()
		}
		t.err = errors.Join(errs...)
		if s, l := t.Dropped(); s+l > 0 {
			fmt.Fprintf(os.Stderr, "telemetry: %d spans and %d log records could not be exported\n", s, l)
		}
	})
	return t.err
}
