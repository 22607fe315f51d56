package otlptrace

import (
	"compress/gzip"
	"context"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the test receiver accepts gzip
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// traceCollector is an in-process OTLP/gRPC trace receiver that keeps what it gets.
type traceCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu      sync.Mutex
	reqs    []*coltracepb.ExportTraceServiceRequest
	headers []metadata.MD
}

func (c *traceCollector) Export(ctx context.Context, r *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	c.mu.Lock()
	c.reqs = append(c.reqs, r)
	c.headers = append(c.headers, md)
	c.mu.Unlock()
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *traceCollector) take() []*coltracepb.ExportTraceServiceRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.reqs
	c.reqs = nil
	return r
}

func startTraceCollector(t *testing.T) (*traceCollector, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	c := &traceCollector{}
	coltracepb.RegisterTraceServiceServer(srv, c)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return c, lis.Addr().String()
}

// richSpans makes spans that use every part of the span model: each attribute type, a
// long value (multi-byte lengths), events, links with trace state, errors, kinds, remote
// parents, dropped counts, two instrumentation scopes and a resource.
func richSpans(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	res := resource.NewSchemaless(attribute.String("service.name", "tuft-test"), attribute.Int("process.pid", 42))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(res),
		sdktrace.WithRawSpanLimits(sdktrace.SpanLimits{AttributeCountLimit: 16, EventCountLimit: 2, LinkCountLimit: 2,
			AttributeValueLengthLimit: -1, AttributePerEventCountLimit: 4, AttributePerLinkCountLimit: 4}))
	ts, _ := trace.ParseTraceState("vendor=abc,other=1")
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9, 9}, SpanID: trace.SpanID{8, 8},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	a := tp.Tracer("tuft/a", trace.WithInstrumentationVersion("1.2.3"),
		trace.WithInstrumentationAttributes(attribute.String("scope.attr", "x")))
	bt := tp.Tracer("tuft/b")

	ctx, root := a.Start(trace.ContextWithRemoteSpanContext(context.Background(), remote), "POST /api/v1/forward",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("s", "text"), attribute.String("long", strings.Repeat("é", 300)),
			attribute.Bool("b", true), attribute.Int64("i", -7), attribute.Float64("f", 2.5),
			attribute.StringSlice("ss", []string{"x", "", "z"}), attribute.Int64Slice("is", []int64{1, -2}),
			attribute.Float64Slice("fs", []float64{0.5}), attribute.BoolSlice("bs", []bool{false, true}),
			attribute.String("", "empty key")))
	root.AddEvent("first_token", trace.WithAttributes(attribute.Int("tuft.tokens", 3)))
	root.AddEvent("second")
	root.AddEvent("dropped: over the event limit")
	_, child := bt.Start(ctx, "hf_model.forward", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(trace.Link{SpanContext: remote, Attributes: []attribute.KeyValue{attribute.String("tuft.link", "enqueued_by")}}))
	for i := range 20 { // over the attribute limit: dropped count
		child.SetAttributes(attribute.Int("n"+string(rune('a'+i)), i))
	}
	child.SetStatus(codes.Error, "boom")
	child.End()
	_, okSpan := a.Start(ctx, "ok")
	okSpan.SetStatus(codes.Ok, "")
	okSpan.End()
	root.End()
	return rec.Ended()
}

// encodeOurs builds the request the batcher would send for spans.
func encodeOurs(spans []sdktrace.ReadOnlySpan) []byte {
	scopes := map[string]int{}
	var scopeMsg [][]byte
	var recs []record
	for _, s := range spans {
		sc := s.InstrumentationScope()
		idx, ok := scopes[sc.Name]
		if !ok {
			idx = len(scopeMsg)
			scopes[sc.Name] = idx
			scopeMsg = append(scopeMsg, appendScope(nil, sc))
		}
		recs = append(recs, record{idx, appendSpan(nil, s)})
	}
	return buildRequest(nil, appendResource(nil, spans[0].Resource()), scopeMsg, recs)
}

// normalize orders a request's scopes by name, so two encodings of the same spans compare.
func normalize(r *coltracepb.ExportTraceServiceRequest) {
	for _, rs := range r.ResourceSpans {
		sort.Slice(rs.ScopeSpans, func(i, j int) bool { return rs.ScopeSpans[i].Scope.GetName() < rs.ScopeSpans[j].Scope.GetName() })
	}
}

// Our encoding must say exactly what the OTLP exporter says for the same spans.
func TestSpanEncodingMatchesTheOTLPExporter(t *testing.T) {
	t.Parallel()
	spans := richSpans(t)
	col, addr := startTraceCollector(t)
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(addr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	_ = exp.Shutdown(context.Background())
	got := col.take()
	if len(got) != 1 {
		t.Fatalf("the exporter sent %d requests", len(got))
	}
	want := got[0]

	var ours coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(encodeOurs(spans), &ours); err != nil {
		t.Fatalf("our request does not decode: %v", err)
	}
	normalize(want)
	normalize(&ours)
	// One deliberate difference: the exporter leaves out a link's trace state, which OTLP
	// carries (Span.Link.trace_state); we keep it.
	for _, ss := range ours.ResourceSpans[0].ScopeSpans {
		for _, sp := range ss.Spans {
			for _, l := range sp.Links {
				if l.TraceState != "vendor=abc,other=1" {
					t.Fatalf("link trace state %q", l.TraceState)
				}
				l.TraceState = ""
			}
		}
	}
	if !proto.Equal(want, &ours) {
		t.Fatalf("encodings differ\nexporter: %v\nours:     %v", want, &ours)
	}
	// Spot checks, so the comparison cannot pass on two empty requests.
	ss := ours.ResourceSpans[0].ScopeSpans
	if len(ss) != 2 || len(ss[0].Spans)+len(ss[1].Spans) != 3 {
		t.Fatalf("scopes/spans: %v", ss)
	}
	var child *tracepb.Span
	for _, s := range ss[1].Spans {
		child = s
	}
	if child.Name != "hf_model.forward" || child.Status.Code != tracepb.Status_STATUS_CODE_ERROR ||
		child.DroppedAttributesCount != 4 || len(child.Links) != 1 || child.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Fatalf("child span decoded as %v", child)
	}
}

func TestGRPCSpanSenderDeliversWithHeaders(t *testing.T) {
	t.Parallel()
	col, addr := startTraceCollector(t)
	send, err := newSpanSender(ProtocolGRPC, map[string]string{"x-tenant": "t1"}, "http://"+addr)
	if err != nil {
		t.Fatal(err)
	}
	defer send.shutdown(context.Background())
	spans := richSpans(t)
	if _, err := send.send(context.Background(), encodeOurs(spans)); err != nil {
		t.Fatal(err)
	}
	got := col.take()
	if len(got) != 1 || len(got[0].ResourceSpans[0].ScopeSpans) != 2 {
		t.Fatalf("collector got %v", got)
	}
	if v := col.headers[0].Get("x-tenant"); len(v) != 1 || v[0] != "t1" {
		t.Fatalf("headers at the collector: %v", col.headers[0])
	}
}

// A collector that is not up yet (connection refused, then 503) is retried until the
// export deadline; a permanent error is not.
func TestHTTPSpanSenderRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	var got coltracepb.ExportTraceServiceRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "bad request "+r.URL.Path, http.StatusBadRequest)
			return
		}
		if calls.Add(1) == 1 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if err := proto.Unmarshal(body, &got); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	defer srv.Close()
	send, err := newSpanSender(ProtocolHTTP, map[string]string{"Authorization": "Bearer k"}, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := send.send(ctx, encodeOurs(richSpans(t))); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 || len(got.ResourceSpans) != 1 {
		t.Fatalf("calls %d, request %v", calls.Load(), &got)
	}

	bad, err := newSpanSender(ProtocolHTTP, nil, srv.URL) // no Authorization: 400
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.send(ctx, encodeOurs(richSpans(t))); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("a permanent error gave %v", err)
	}
}

func TestEndMsgLengths(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 127, 128, 16383, 16384, 1 << 21} {
		b, start := beginMsg([]byte{0xAA}, 3)
		b = append(b, make([]byte, n)...)
		b = endMsg(b, start)
		var r coltracepb.ExportTraceServiceRequest // any message: field 3 is unknown and kept raw
		if err := proto.Unmarshal(b[1:], &r); err != nil {
			t.Fatalf("length %d: %v", n, err)
		}
		if got := len(r.ProtoReflect().GetUnknown()); got != len(b)-1 {
			t.Fatalf("length %d: %d bytes kept of %d", n, got, len(b)-1)
		}
	}
}

// The standard exporter variables apply to our span sender as they would to the OTLP
// exporter: headers (config wins), gzip, and a CA certificate for an https endpoint.
func TestSpanSenderHonoursOTLPEnvironment(t *testing.T) {
	var got coltracepb.ExportTraceServiceRequest
	var hdr http.Header
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr = r.Header.Clone()
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		if err := proto.Unmarshal(b, &got); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", ca)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-a=1,x-b=two%20words")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-a=traces")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
	send, err := newSpanSender(ProtocolHTTP, map[string]string{"x-c": "config"}, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := send.send(context.Background(), encodeOurs(richSpans(t))); err != nil {
		t.Fatal(err)
	}
	if len(got.ResourceSpans) != 1 || hdr.Get("Content-Encoding") != "gzip" || hdr.Get("x-a") != "traces" ||
		hdr.Get("x-b") != "two words" || hdr.Get("x-c") != "config" {
		t.Fatalf("request %v, headers %v", &got, hdr)
	}

	// gzip over gRPC too (the receiver decompresses: the grpc gzip codec is registered).
	col, addr := startTraceCollector(t)
	gs, err := newSpanSender(ProtocolGRPC, nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer gs.shutdown(context.Background())
	if _, err := gs.send(context.Background(), encodeOurs(richSpans(t))); err != nil {
		t.Fatal(err)
	}
	// grpc-go hides the message encoding from handlers; the request arriving whole through
	// the gzip codec, with the compressor among the call options, is what can be seen.
	if reqs := col.take(); len(reqs) != 1 || len(reqs[0].ResourceSpans[0].ScopeSpans) != 2 || len(gs.(*grpcSpanSender).opts) != 2 {
		t.Fatalf("gRPC: %d requests", len(reqs))
	}
}

func TestBadOTLPEnvironmentIsNamed(t *testing.T) {
	cases := map[string]string{
		"OTEL_EXPORTER_OTLP_HEADERS":     "novalue",
		"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd",
		"OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem",
		"OTEL_BSP_MAX_QUEUE_SIZE":        "-5",
		"OTEL_BSP_SCHEDULE_DELAY":        "soon",
	}
	for k, v := range cases {
		t.Run(k, func(t *testing.T) {
			t.Setenv(k, v)
			p, err := New(WithEndpoint("127.0.0.1:1"))
			if err == nil {
				p.Shutdown(context.Background())
				t.Fatalf("%s=%s accepted", k, v)
			}
			if !strings.Contains(err.Error(), k) {
				t.Fatalf("error %q does not name %s", err, k)
			}
		})
	}
}

func TestBatchSettingsFromEnv(t *testing.T) {
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "500")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "250")
	p, err := New(WithEndpoint("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	if p.maxQueue != 100 || p.maxBatch != 100 || p.interval != 250*time.Millisecond {
		t.Fatalf("queue %d, batch %d, delay %v", p.maxQueue, p.maxBatch, p.interval)
	}
	// Options win over the environment.
	q, err := New(WithEndpoint("127.0.0.1:1"), WithMaxQueueSize(10), WithMaxExportBatchSize(4), WithBatchTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Shutdown(context.Background())
	if q.maxQueue != 10 || q.maxBatch != 4 || q.interval != time.Second {
		t.Fatalf("with options: queue %d, batch %d, delay %v", q.maxQueue, q.maxBatch, q.interval)
	}
}
