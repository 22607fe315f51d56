package telemetry

import (
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Instrumented components take their providers as options, in the style of go-redis's
// redisotel: WithTracerProvider and WithInstruments (or WithMeterProvider), defaulting to
// the process globals. A test hands a component its own recorder through these options
// and never swaps a global; a process's main decides whether to install globals at all
// (telemetry/setup's Telemetry.InstallGlobal).

// Tracer returns a tracer of the global provider (the project's get_tracer, spec §8). It
// is looked up per call, so a provider installed later is honoured. Components that take
// Options use Settings.Tracer instead.
func Tracer(name string) trace.Tracer { return otel.Tracer(name) }

var defaultInstruments atomic.Pointer[Instruments]

// Metrics returns the process's default instruments (spec §8's one registry): those its
// main installed with SetMetrics, else instruments on the global meter provider (which
// forwards to a provider installed later). Components that take Options use
// Settings.Instruments instead.
func Metrics() *Instruments {
	if m := defaultInstruments.Load(); m != nil {
		return m
	}
	defaultInstruments.CompareAndSwap(nil, NewInstruments(otel.GetMeterProvider(), true))
	return defaultInstruments.Load()
}

// SetMetrics installs the process's default instruments. Only a process's main calls it,
// through telemetry/setup's InstallGlobal; components and tests pass instruments as an
// option instead.
func SetMetrics(m *Instruments) { defaultInstruments.Store(m) }

// Settings are an instrumented component's providers, resolved from Options.
type Settings struct {
	TracerProvider trace.TracerProvider
	// MeterProvider is for the third-party instrumentation a component wires in (otelgrpc);
	// the contract's own metrics are Instruments.
	MeterProvider metric.MeterProvider
	Instruments   *Instruments
}

// Option sets where an instrumented component's spans and measurements go.
type Option func(*Settings)

// WithTracerProvider sends the component's spans to tp (nil: the global provider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *Settings) {
		if tp != nil {
			s.TracerProvider = tp
		}
	}
}

// WithInstruments records the component's measurements on in (nil: Metrics()).
func WithInstruments(in *Instruments) Option {
	return func(s *Settings) {
		if in != nil {
			s.Instruments = in
		}
	}
}

// WithMeterProvider records the component's measurements on mp: the third-party
// instrumentation's directly, the contract's on instruments of mp with model_id on the
// metrics that carry it, unless WithInstruments gives those (nil: the globals).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(s *Settings) {
		if mp != nil {
			s.MeterProvider = mp
		}
	}
}

// NewSettings applies opts over the defaults: the global tracer and meter providers and
// Metrics().
func NewSettings(opts ...Option) Settings {
	var s Settings
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	if s.TracerProvider == nil {
		s.TracerProvider = otel.GetTracerProvider()
	}
	switch {
	case s.Instruments != nil:
	case s.MeterProvider != nil:
		s.Instruments = NewInstruments(s.MeterProvider, true)
	default:
		s.Instruments = Metrics()
	}
	if s.MeterProvider == nil {
		s.MeterProvider = otel.GetMeterProvider()
	}
	return s
}

// Tracer returns the tracer of scope on the settings' provider.
func (s Settings) Tracer(scope string) trace.Tracer { return s.TracerProvider.Tracer(scope) }

// Options returns s as options, for handing the same providers to the components a
// component builds.
func (s Settings) Options() []Option {
	return []Option{WithTracerProvider(s.TracerProvider), WithMeterProvider(s.MeterProvider), WithInstruments(s.Instruments)}
}
