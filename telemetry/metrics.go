package telemetry

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
)

// Instruments holds every instrument of the "tuft" meter, created once per meter provider.
type Instruments struct {
	// HTTPServerDuration is the standard http.server.request.duration.
	HTTPServerDuration       metric.Float64Histogram
	TrainingModelsActive     metric.Int64UpDownCounter
	TrainingTokensPerSecond  metric.Float64Histogram
	TrainingCheckpointsSaved metric.Int64Counter
	TrainingCheckpointSize   metric.Int64Histogram
	SamplingSessionsActive   metric.Int64UpDownCounter
	SamplingRequests         metric.Int64Counter
	SamplingDuration         metric.Float64Histogram
	SamplingTokensPerSecond  metric.Float64Histogram
	SamplingOutputTokens     metric.Int64Histogram
	FuturesQueueLength       metric.Int64UpDownCounter
	FuturesCreated           metric.Int64Counter
	FuturesCompleted         metric.Int64Counter
	FuturesWaitTime          metric.Float64Histogram
	FuturesExecutionTime     metric.Float64Histogram
	RedisOperationDuration   metric.Float64Histogram
	// StoreWriteFailures counts record writes that failed with no caller to tell, by reason.
	StoreWriteFailures metric.Int64Counter
	// HTTPConnectionsClosed: connections closed to keep the connection slots, by reason.
	HTTPConnectionsClosed metric.Int64Counter
	// SessionSpansDropped counts spans the session-span record dropped, by reason.
	SessionSpansDropped metric.Int64Counter
	// AuditEvents counts audit-log entries, by event and status.
	AuditEvents metric.Int64Counter
	// UsageTokens: tokens trained, prefilled and sampled, by base model and kind.
	UsageTokens metric.Int64Counter
	// MetricStreamsActive: open training-metric streams.
	MetricStreamsActive metric.Int64UpDownCounter
	// StoreOperationDuration is the embedded store's db.client.operation.duration (the
	// contract's persistence metric names Redis; other stores follow the semantic
	// conventions instead of posing as Redis).
	StoreOperationDuration metric.Float64Histogram

	// ModelIDAttribute is false when telemetry.metrics.model_id_attribute is off:
	// callers then leave model_id off the metrics that carry it.
	ModelIDAttribute bool

	// noop is true for instruments on a no-op meter provider (telemetry disabled).
	noop bool
}

// Enabled reports whether measurements go anywhere: false for instruments on a no-op
// meter provider, so a hot path can skip building what no one reads.
func (in *Instruments) Enabled() bool { return !in.noop }

// secondsBuckets are the explicit bucket boundaries of every histogram in seconds.
var secondsBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// tokensPerSecondBuckets are the bucket boundaries of the throughput histograms.
var tokensPerSecondBuckets = []float64{1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000}

// tokenCountBuckets are the bucket boundaries of token-count histograms.
var tokenCountBuckets = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536}

// byteBuckets are the bucket boundaries of size histograms.
var byteBuckets = []float64{1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28, 1 << 30, 1 << 32}

// NewInstruments creates every instrument on mp's "tuft" meter.
func NewInstruments(mp metric.MeterProvider, modelIDAttribute bool) *Instruments {
	m := mp.Meter(MeterTuft)
	_, noop := mp.(metricnoop.MeterProvider)
	in := &Instruments{ModelIDAttribute: modelIDAttribute, noop: noop}
	in.HTTPServerDuration, _ = mp.Meter(ScopeHTTP).Float64Histogram(MetricHTTPServerDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of HTTP server requests."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10))
	// Instrument creation only fails for invalid names or units, which are constants here;
	// the SDK returns a usable no-op instrument alongside the error.
	in.TrainingModelsActive, _ = m.Int64UpDownCounter(MetricTrainingModelsActive, metric.WithUnit("{model}"),
		metric.WithDescription("Training runs (LoRA adapters) currently loaded."))
	in.TrainingTokensPerSecond, _ = m.Float64Histogram(MetricTrainingTokensPerSecond, metric.WithUnit("{token}/s"),
		metric.WithDescription("Input tokens per second of each forward / forward_backward."),
		metric.WithExplicitBucketBoundaries(tokensPerSecondBuckets...))
	in.TrainingCheckpointsSaved, _ = m.Int64Counter(MetricTrainingCheckpointsSaved, metric.WithUnit("{checkpoint}"),
		metric.WithDescription("Checkpoints saved."))
	in.TrainingCheckpointSize, _ = m.Int64Histogram(MetricTrainingCheckpointSize, metric.WithUnit("By"),
		metric.WithDescription("Size of each saved checkpoint."), metric.WithExplicitBucketBoundaries(byteBuckets...))
	in.SamplingSessionsActive, _ = m.Int64UpDownCounter(MetricSamplingSessionsActive, metric.WithUnit("{session}"),
		metric.WithDescription("Sampling sessions currently open."))
	in.SamplingRequests, _ = m.Int64Counter(MetricSamplingRequests, metric.WithUnit("{request}"),
		metric.WithDescription("Sample requests executed."))
	in.SamplingDuration, _ = m.Float64Histogram(MetricSamplingDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of each sample request."), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	in.SamplingTokensPerSecond, _ = m.Float64Histogram(MetricSamplingTokensPerSecond, metric.WithUnit("{token}/s"),
		metric.WithDescription("Output tokens per second of each sample request."),
		metric.WithExplicitBucketBoundaries(tokensPerSecondBuckets...))
	in.SamplingOutputTokens, _ = m.Int64Histogram(MetricSamplingOutputTokens, metric.WithUnit("{token}"),
		metric.WithDescription("Output tokens of each returned sequence."), metric.WithExplicitBucketBoundaries(tokenCountBuckets...))
	in.FuturesQueueLength, _ = m.Int64UpDownCounter(MetricFuturesQueueLength, metric.WithUnit("{future}"),
		metric.WithDescription("Futures waiting or running."))
	in.FuturesCreated, _ = m.Int64Counter(MetricFuturesCreated, metric.WithUnit("{future}"),
		metric.WithDescription("Futures created."))
	in.FuturesCompleted, _ = m.Int64Counter(MetricFuturesCompleted, metric.WithUnit("{future}"),
		metric.WithDescription("Futures completed, by status."))
	in.FuturesWaitTime, _ = m.Float64Histogram(MetricFuturesWaitTime, metric.WithUnit("s"),
		metric.WithDescription("Time from enqueue to the start of execution."), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	in.FuturesExecutionTime, _ = m.Float64Histogram(MetricFuturesExecutionTime, metric.WithUnit("s"),
		metric.WithDescription("Execution time of each future."), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	in.StoreWriteFailures, _ = m.Int64Counter(MetricStoreWriteFailures, metric.WithUnit("{write}"),
		metric.WithDescription("Record writes that failed where no caller could be told, by reason (each is logged too)."))
	in.HTTPConnectionsClosed, _ = m.Int64Counter(MetricHTTPConnectionsClosed, metric.WithUnit("{connection}"),
		metric.WithDescription("Client connections the server closed to keep its connection slots, by reason."))
	in.SessionSpansDropped, _ = m.Int64Counter(MetricSessionSpansDropped, metric.WithUnit("{span}"),
		metric.WithDescription("Spans the per-session span record did not keep or dropped later, by reason."))
	in.AuditEvents, _ = m.Int64Counter(MetricAuditEvents, metric.WithUnit("{event}"),
		metric.WithDescription("Audit-log entries, by event and status (kept, over_day_limit, write_failed)."))
	in.UsageTokens, _ = m.Int64Counter(MetricUsageTokens, metric.WithUnit("{token}"),
		metric.WithDescription("Tokens tenants trained, prefilled and sampled, by base model and kind."))
	in.MetricStreamsActive, _ = m.Int64UpDownCounter(MetricMetricStreamsActive, metric.WithUnit("{stream}"),
		metric.WithDescription("Open training-metric streams (server-sent events)."))
	in.RedisOperationDuration, _ = m.Float64Histogram(MetricRedisOperationDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of each Redis command."), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	in.StoreOperationDuration, _ = mp.Meter(ScopeStore).Float64Histogram(MetricDBClientOperationDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of each embedded-store operation."), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	return in
}

// attrSets holds measurement options for attribute sets that repeat on hot paths (an
// operation type, a status, an HTTP route): building an attribute.Set sorts and
// allocates, and these few combinations are recorded thousands of times a second. The
// key is a comparable struct, so a lookup allocates nothing.
var attrSets struct {
	mu sync.RWMutex
	m  map[attrKey]*setEntry
}

type attrKey struct {
	k1, v1, k2, v2 string
}

// setEntry is one cached set in the forms the instruments take. The option slices are
// passed with "..." (Record(ctx, v, e.rec...)): a one-option variadic call would
// otherwise allocate its slice on every measurement.
type setEntry struct {
	opt metric.MeasurementOption
	rec []metric.RecordOption
	add []metric.AddOption
}

// maxCachedSets bounds the attribute-set cache: sets that carry a model id grow with the
// number of training runs.
const maxCachedSets = 4096

func lookupSet(key attrKey) (*setEntry, bool) {
	attrSets.mu.RLock()
	defer attrSets.mu.RUnlock()
	e, ok := attrSets.m[key]
	return e, ok
}

func storeSet(key attrKey, attrs []attribute.KeyValue) *setEntry {
	o := metric.WithAttributeSet(attribute.NewSet(attrs...))
	e := &setEntry{opt: o, rec: []metric.RecordOption{o}, add: []metric.AddOption{o}}
	attrSets.mu.Lock()
	defer attrSets.mu.Unlock()
	if attrSets.m == nil {
		attrSets.m = map[attrKey]*setEntry{}
	}
	if len(attrSets.m) < maxCachedSets { // past the cap (very many model ids) sets are built per call
		attrSets.m[key] = e
	}
	return e
}

func stringsSet(kv []string) *setEntry {
	var key attrKey
	switch len(kv) {
	case 2:
		key = attrKey{k1: kv[0], v1: kv[1]}
	case 4:
		key = attrKey{k1: kv[0], v1: kv[1], k2: kv[2], v2: kv[3]}
	default:
		panic("telemetry.Attrs takes one or two key/value pairs")
	}
	if e, ok := lookupSet(key); ok {
		return e
	}
	attrs := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		attrs = append(attrs, attribute.String(kv[i], kv[i+1]))
	}
	return storeSet(key, attrs)
}

// Attrs returns the measurement option of one or two string attributes (key, value[,
// key, value]), built once per distinct combination. Use it only for attributes of
// bounded cardinality.
func Attrs(kv ...string) metric.MeasurementOption { return stringsSet(kv).opt }

// RecordAttrs is Attrs as the options of a histogram's Record, to pass with "...": on
// a hot path it saves the allocation of a one-option variadic slice per measurement.
func RecordAttrs(kv ...string) []metric.RecordOption { return stringsSet(kv).rec }

// AddAttrs is Attrs as the options of a counter's Add, to pass with "...".
func AddAttrs(kv ...string) []metric.AddOption { return stringsSet(kv).add }
