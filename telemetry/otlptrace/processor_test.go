package otlptrace

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// gatedSender decodes and records what it is sent; while gate is non-nil each send waits
// on it. Each send signals entered on arrival (before the gate) and sent after recording,
// where they are non-nil.
type gatedSender struct {
	t       *testing.T
	gate    chan struct{}
	entered chan struct{}
	sent    chan struct{}
	mu      sync.Mutex
	batches []int
	names   []string
	shut    bool
}

func (e *gatedSender) send(ctx context.Context, req []byte) (int64, error) {
	signal(e.entered)
	defer signal(e.sent)
	if e.gate != nil {
		select {
		case <-e.gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	var r coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(req, &r); err != nil {
		e.t.Errorf("the batcher sent an undecodable request: %v", err)
		return 0, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, rs := range r.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				e.names = append(e.names, sp.Name)
				n++
			}
		}
	}
	e.batches = append(e.batches, n)
	return 0, nil
}

// signal notes an event on ch without blocking (ch is buffered; the first events count).
func signal(ch chan struct{}) {
	if ch == nil {
		return
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (e *gatedSender) shutdown(context.Context) error {
	e.mu.Lock()
	e.shut = true
	e.mu.Unlock()
	return nil
}

func (e *gatedSender) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.names)
}

func startSpans(tp trace.TracerProvider, n int) {
	tr := tp.Tracer("test")
	for i := 0; i < n; i++ {
		_, sp := tr.Start(context.Background(), "op")
		sp.End()
	}
}

func TestSpanBatcherExportsInBatches(t *testing.T) {
	t.Parallel()
	exp := &gatedSender{t: t}
	b := newProcessor(exp, &dropCounter{}, 100, 8, time.Hour, time.Second)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
	startSpans(tp, 20)
	if err := b.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := exp.count(); got != 20 {
		t.Fatalf("exported %d spans after ForceFlush, want 20", got)
	}
	for _, n := range exp.batches {
		if n > 8 {
			t.Fatalf("a batch of %d spans, over the batch size 8: %v", n, exp.batches)
		}
	}
	startSpans(tp, 3)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := exp.count(); got != 23 || !exp.shut {
		t.Fatalf("after Shutdown: %d spans exported (want 23), exporter shut down %v", got, exp.shut)
	}
}

func TestSpanBatcherExportsOnTimer(t *testing.T) {
	exp := &gatedSender{t: t, sent: make(chan struct{}, 8)}
	b := newProcessor(exp, &dropCounter{}, 100, 50, 20*time.Millisecond, time.Second)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
	defer tp.Shutdown(context.Background())
	startSpans(tp, 3) // fewer than a batch: only the timer sends them
	timeout := time.After(5 * time.Second)
	for exp.count() < 3 {
		select {
		case <-exp.sent:
		case <-timeout:
			t.Fatal("the timer did not export a partial batch")
		}
	}
}

// A stalled exporter must not block span ends: the queue fills, further spans are dropped
// and counted, and a line says so.
func TestSpanBatcherCountsQueueFullDrops(t *testing.T) {
	exp := &gatedSender{t: t, gate: make(chan struct{}), entered: make(chan struct{}, 8)}
	drops := &dropCounter{}
	b := newProcessor(exp, drops, 10, 5, time.Hour, 10*time.Second)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
	done := make(chan struct{})
	go func() {
		startSpans(tp, 5) // one batch: the loop takes it and blocks in the exporter
		<-exp.entered
		startSpans(tp, 30) // 10 fit in the queue, 20 are dropped
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("span ends blocked behind a stalled exporter")
	}
	if got := drops.queueFull.Load(); got != 20 {
		t.Fatalf("queue-full drops = %d, want 20", got)
	}
	var line bytes.Buffer
	drops.reportQueueFull(&line, 0)
	if !strings.Contains(line.String(), "20 spans dropped") {
		t.Fatalf("report line %q does not give the count", line.String())
	}
	line.Reset()
	drops.reportQueueFull(&line, 0)
	if line.Len() != 0 {
		t.Fatalf("a second report without new drops: %q", line.String())
	}
	close(exp.gate)
	if err := b.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	startSpans(tp, 3) // the queue was emptied: spans are taken again
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := exp.count(); got != 18 || drops.queueFull.Load() != 20 {
		t.Fatalf("exported %d spans (want the 15 queued + 3 after), dropped %d", got, drops.queueFull.Load())
	}
}

func TestSpanBatcherShutdownIsBounded(t *testing.T) {
	exp := &gatedSender{t: t, gate: make(chan struct{})} // never opens
	b := newProcessor(exp, &dropCounter{}, 100, 10, time.Hour, time.Hour)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
	startSpans(tp, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := tp.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown with a stalled exporter reported success")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Shutdown took %v past its 100 ms deadline", d)
	}
}

// endCounter counts the spans the SDK hands to its processors, and closes reached when
// the count reaches at.
type endCounter struct {
	n       atomic.Int64
	at      int64
	reached chan struct{}
}

func (c *endCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c *endCounter) OnEnd(sdktrace.ReadOnlySpan) {
	if c.n.Add(1) == c.at {
		close(c.reached)
	}
}

func (c *endCounter) Shutdown(context.Context) error   { return nil }
func (c *endCounter) ForceFlush(context.Context) error { return nil }

// Under concurrent span ends, flushes and a shutdown, every span handed to the batcher is
// either exported or counted as dropped: none is lost silently, none sent twice. (Spans
// that end after the provider shut down never reach a processor.)
func TestSpanBatcherAccountsForEverySpan(t *testing.T) {
	t.Parallel()
	exp := &gatedSender{t: t}
	drops := &dropCounter{}
	b := newProcessor(exp, drops, 64, 16, time.Millisecond, time.Second)
	const workers, each = 8, 500
	ends := &endCounter{at: workers * each / 4, reached: make(chan struct{})}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(ends), sdktrace.WithSpanProcessor(b))
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			startSpans(tp, each)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 20 {
			_ = b.ForceFlush(context.Background())
		}
	}()
	<-ends.reached // shut down mid-stream: some ends come after it
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got, want := int64(exp.count())+drops.queueFull.Load(), ends.n.Load(); got != want || want == 0 {
		t.Fatalf("exported %d + dropped %d = %d, want the %d spans handed over", exp.count(), drops.queueFull.Load(), got, want)
	}
}
