package otlptrace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// Defaults of the processor's sizes and timings. The standard OTEL_BSP_MAX_QUEUE_SIZE,
// OTEL_BSP_MAX_EXPORT_BATCH_SIZE and OTEL_BSP_SCHEDULE_DELAY (milliseconds) variables
// override them, and options override those. The queue holds a few seconds of a busy
// control plane's spans, so a slow export round does not drop them.
const (
	DefaultMaxQueueSize       = 32768
	DefaultMaxExportBatchSize = 2048
	DefaultScheduleDelay      = 2 * time.Second
	DefaultExportTimeout      = 3 * time.Second
)

// Protocols of the OTLP export.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// settings are the processor's configuration, from the defaults, the environment and
// the options in that order.
type settings struct {
	endpoint      string
	protocol      string
	headers       map[string]string
	maxQueue      int
	maxBatch      int
	scheduleDelay time.Duration
	exportTimeout time.Duration
	onError       func(error)
}

// Option configures New.
type Option func(*settings)

// WithEndpoint sets the collector: host:port (plain text) or an http(s) URL. Default
// localhost:4317 for gRPC, http://localhost:4318 for HTTP.
func WithEndpoint(ep string) Option { return func(s *settings) { s.endpoint = ep } }

// WithProtocol sets ProtocolGRPC (default) or ProtocolHTTP.
func WithProtocol(p string) Option { return func(s *settings) { s.protocol = p } }

// WithHeaders adds headers to every export; they win over OTEL_EXPORTER_OTLP_*HEADERS.
func WithHeaders(h map[string]string) Option { return func(s *settings) { s.headers = h } }

// WithExportTimeout bounds each export request, retries included.
func WithExportTimeout(d time.Duration) Option { return func(s *settings) { s.exportTimeout = d } }

// WithMaxQueueSize bounds the spans waiting for export; more are dropped and counted.
func WithMaxQueueSize(n int) Option { return func(s *settings) { s.maxQueue = n } }

// WithMaxExportBatchSize bounds the spans of one export request.
func WithMaxExportBatchSize(n int) Option { return func(s *settings) { s.maxBatch = n } }

// WithBatchTimeout is the longest a span waits before its batch is sent.
func WithBatchTimeout(d time.Duration) Option { return func(s *settings) { s.scheduleDelay = d } }

// WithErrorHandler receives export errors (default: the OTel global error handler).
func WithErrorHandler(f func(error)) Option { return func(s *settings) { s.onError = f } }

// settingsFromEnv is the defaults with the OTEL_BSP_* variables applied.
func settingsFromEnv() (settings, error) {
	s := settings{protocol: ProtocolGRPC, maxQueue: DefaultMaxQueueSize, maxBatch: DefaultMaxExportBatchSize,
		scheduleDelay: DefaultScheduleDelay, exportTimeout: DefaultExportTimeout, onError: otel.Handle}
	for _, v := range []struct {
		key string
		set func(int)
	}{
		{"OTEL_BSP_MAX_QUEUE_SIZE", func(n int) { s.maxQueue = n }},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", func(n int) { s.maxBatch = n }},
		{"OTEL_BSP_SCHEDULE_DELAY", func(n int) { s.scheduleDelay = time.Duration(n) * time.Millisecond }},
	} {
		raw := strings.TrimSpace(os.Getenv(v.key))
		if raw == "" {
			continue
		}
		n, err := strconv.Atoi(raw)
		if err != nil || n <= 0 {
			return s, fmt.Errorf("telemetry: %s=%q is not a positive integer", v.key, raw)
		}
		v.set(n)
	}
	return s, nil
}

// New returns a span processor that exports sampled spans to an OTLP collector. It reads
// the OTEL_BSP_* and OTEL_EXPORTER_OTLP_* variables once, here; options win over them.
func New(opts ...Option) (*Processor, error) {
	s, err := settingsFromEnv()
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(&s)
	}
	if s.maxQueue <= 0 || s.maxBatch <= 0 || s.scheduleDelay <= 0 || s.exportTimeout <= 0 {
		return nil, fmt.Errorf("telemetry: span processor sizes and timings must be positive (queue %d, batch %d, delay %v, timeout %v)",
			s.maxQueue, s.maxBatch, s.scheduleDelay, s.exportTimeout)
	}
	s.maxBatch = min(s.maxBatch, s.maxQueue)
	if s.endpoint == "" {
		s.endpoint = "localhost:4317"
		if s.protocol == ProtocolHTTP {
			s.endpoint = "http://localhost:4318"
		}
	}
	send, err := newSpanSender(s.protocol, s.headers, s.endpoint)
	if err != nil {
		return nil, err
	}
	p := newProcessor(send, &dropCounter{}, s.maxQueue, s.maxBatch, s.scheduleDelay, s.exportTimeout)
	if s.onError != nil {
		p.onError = s.onError
	}
	return p, nil
}

// Dropped returns how many spans were not delivered: dropped on a full queue, and
// rejected or lost in a failed export.
func (b *Processor) Dropped() (queueFull, failed int64) {
	return b.drops.queueFull.Load(), b.drops.failed.Load()
}

// Processor is the span processor in front of the OTLP trace export. Like the SDK's
// BatchSpanProcessor it has a bounded queue, batches, a timer and export timeouts, and
// never blocks the caller. Unlike it:
//   - it encodes a span to OTLP protobuf when the span ends (see encode.go), so the
//     queue is one pointer-free byte buffer rather than thousands of live span objects
//     that every garbage collection must scan, and the export is a concatenation;
//   - it counts the spans it drops on a full queue (the SDK's processor drops them
//     silently, so an operator could not tell a healthy pipeline from one that loses
//     most of its spans) and says so in a rate-limited line.
//
// One Processor serves one tracer provider: the resource is that of the first span.
type Processor struct {
	send     spanSender
	drops    *dropCounter
	maxQueue int // spans
	maxBatch int // spans per export request
	interval time.Duration
	timeout  time.Duration
	onError  func(error)

	mu       sync.Mutex
	queue    []byte // records: scope index (varint), span message (length-prefixed)
	spare    []byte
	queued   int
	scopes   map[instrumentation.Scope]int
	scopeMsg [][]byte // encoded InstrumentationScope per index
	resource []byte   // encoded Resource, from the first span
	closed   bool
	// saturated is set (under mu) when the queue is full or closed, and cleared when an
	// export round empties it; OnEnd reads it without the lock.
	saturated atomic.Bool
	flushes   []chan struct{} // ForceFlush callers waiting for the next export round
	req       []byte          // the last request's buffer, reused (only the loop goroutine touches it)

	kick chan struct{} // a full batch is waiting, or a flush was asked for
	stop chan struct{}
	done chan struct{}
}

// maxQueueBytes bounds the queue's memory whatever the spans carry (maxQueue bounds
// their number).
const maxQueueBytes = 32 << 20

// maxRequestBytes keeps one export request well under the 4 MiB a gRPC server (the
// collector's OTLP receiver among them) accepts by default.
const maxRequestBytes = 2 << 20

var scratchPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func newProcessor(send spanSender, drops *dropCounter, maxQueue, maxBatch int, interval, timeout time.Duration) *Processor {
	b := &Processor{send: send, drops: drops, maxQueue: maxQueue, maxBatch: maxBatch, interval: interval, timeout: timeout, onError: otel.Handle,
		scopes: map[instrumentation.Scope]int{}, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	go b.loop()
	return b
}

// OnStart implements sdktrace.SpanProcessor.
func (b *Processor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd implements sdktrace.SpanProcessor: it encodes and queues the span or, with the
// queue full, drops and counts it. It never waits for the exporter.
func (b *Processor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if b.saturated.Load() { // full or closed: do not spend the encoding on a span to drop
		b.drops.queueFull.Add(1)
		return
	}
	sp := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(sp)
	*sp = appendSpan((*sp)[:0], s)
	enc := *sp
	b.mu.Lock()
	if b.closed || b.queued >= b.maxQueue || len(b.queue)+len(enc) > maxQueueBytes {
		if b.closed || b.queued >= b.maxQueue { // (one oversized span does not close the door to small ones)
			b.saturated.Store(true)
		}
		b.mu.Unlock()
		b.drops.queueFull.Add(1)
		return
	}
	if b.resource == nil {
		b.resource = appendResource(make([]byte, 0, 256), s.Resource())
	}
	scope := s.InstrumentationScope()
	idx, ok := b.scopes[scope]
	if !ok {
		idx = len(b.scopeMsg)
		b.scopes[scope] = idx
		b.scopeMsg = append(b.scopeMsg, appendScope(nil, scope))
	}
	b.queue = protowire.AppendVarint(b.queue, uint64(idx))
	b.queue = protowire.AppendBytes(b.queue, enc)
	b.queued++
	full := b.queued%b.maxBatch == 0
	b.mu.Unlock()
	if full {
		b.wake()
	}
}

func (b *Processor) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *Processor) loop() {
	defer close(b.done)
	t := time.NewTimer(b.interval)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-b.kick:
		case <-t.C:
		}
		b.exportQueued()
		t.Reset(b.interval)
	}
}

// record is one queued span: its scope and its encoded Span message.
type record struct {
	scope int
	span  []byte
}

// exportQueued takes everything queued so far and sends it in requests of at most
// maxBatch spans and maxRequestBytes.
func (b *Processor) exportQueued() {
	b.mu.Lock()
	buf, n := b.queue, b.queued
	b.queue, b.spare, b.queued = b.spare[:0], nil, 0
	b.saturated.Store(b.closed)
	waiting := b.flushes
	b.flushes = nil
	resource := b.resource
	scopes := b.scopeMsg[:len(b.scopeMsg):len(b.scopeMsg)]
	b.mu.Unlock()

	recs := make([]record, 0, min(n, b.maxBatch))
	req := b.req
	size := 0
	flush := func() {
		if len(recs) == 0 {
			return
		}
		req = buildRequest(req[:0], resource, scopes, recs)
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		rejected, err := b.send.send(ctx, req)
		cancel()
		if err != nil {
			if rejected == 0 {
				rejected = int64(len(recs))
			}
			b.drops.failed.Add(rejected)
			b.onError(err)
		}
		recs, size = recs[:0], 0
	}
	for rest := buf; len(rest) > 0; {
		idx, k := protowire.ConsumeVarint(rest)
		if k < 0 {
			break // cannot happen: the buffer holds only what OnEnd wrote
		}
		span, m := protowire.ConsumeBytes(rest[k:])
		if m < 0 {
			break
		}
		rest = rest[k+m:]
		if len(recs) == b.maxBatch || size+len(span) > maxRequestBytes {
			flush()
		}
		recs = append(recs, record{int(idx), span})
		size += len(span) + 8
	}
	flush()
	if cap(req) <= 2*maxRequestBytes {
		b.req = req[:0]
	}

	b.mu.Lock()
	if b.spare == nil && cap(buf) <= 2*maxQueueBytes {
		b.spare = buf[:0]
	}
	b.mu.Unlock()
	for _, w := range waiting {
		close(w)
	}
	b.drops.reportQueueFull(os.Stderr, 10*time.Second)
}

// buildRequest appends an ExportTraceServiceRequest with one ResourceSpans holding one
// ScopeSpans per scope present in recs.
func buildRequest(out, resource []byte, scopes [][]byte, recs []record) []byte {
	var rs int
	out, rs = beginMsg(out, 1)        // ExportTraceServiceRequest.resource_spans
	out = appendMsg(out, 1, resource) // ResourceSpans.resource
	for si, scope := range scopes {
		if !slices.ContainsFunc(recs, func(r record) bool { return r.scope == si }) {
			continue
		}
		var ss int
		out, ss = beginMsg(out, 2)     // ResourceSpans.scope_spans
		out = appendMsg(out, 1, scope) // ScopeSpans.scope
		for _, rec := range recs {
			if rec.scope == si {
				out = appendMsg(out, 2, rec.span) // ScopeSpans.spans
			}
		}
		out = endMsg(out, ss)
	}
	return endMsg(out, rs)
}

// ForceFlush implements sdktrace.SpanProcessor: it waits until what was queued before
// the call has been handed to the collector, or ctx ends.
func (b *Processor) ForceFlush(ctx context.Context) error {
	w := make(chan struct{})
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.flushes = append(b.flushes, w)
	b.mu.Unlock()
	b.wake()
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown implements sdktrace.SpanProcessor: it stops the loop, exports what is queued
// and closes the connection, all bounded by ctx.
func (b *Processor) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.saturated.Store(true)
	b.mu.Unlock()
	close(b.stop)
	select {
	case <-b.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	finished := make(chan struct{})
	go func() { b.exportQueued(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		return errors.Join(ctx.Err(), b.send.shutdown(ctx))
	}
	return b.send.shutdown(ctx)
}

// dropCounter counts what the processor failed to deliver: a collector that is down
// loses data, and the operator must be able to see how much.
type dropCounter struct {
	failed    atomic.Int64 // export failures and collector rejections
	queueFull atomic.Int64 // spans dropped because the queue was full

	reported   atomic.Int64 // queueFull at the last report
	lastReport atomic.Int64 // unix nanoseconds
}

// reportQueueFull writes one line to w when spans were dropped on a full queue since
// the last line, at most once per interval.
func (d *dropCounter) reportQueueFull(w io.Writer, interval time.Duration) {
	n := d.queueFull.Load()
	prev := d.reported.Load()
	now := time.Now().UnixNano()
	if n == prev || now-d.lastReport.Load() < int64(interval) || !d.reported.CompareAndSwap(prev, n) {
		return
	}
	d.lastReport.Store(now)
	fmt.Fprintf(w, "telemetry: span queue full: %d spans dropped (%d in all); the exporter cannot keep up with the span rate\n", n-prev, n)
}
