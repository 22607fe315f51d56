package service

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/telemetry"
)

// The per-session span record (sessions.record_spans, docs/observability.md "Session
// spans"): this server's own spans of a session's requests, kept for the session's owner.
// The span processor (telemetry/setup) hands each ended span to RecordSessionSpan, which
// only queues it: span.End runs anywhere, under the service's locks too. The recorder
// goroutine resolves the span's session (its tuft.session_id, else the session of its
// training run or sampling session), keeps it only when the span's tenant owns that
// session, and writes it to the store: one key per span (keySpan+session+"/"+seq) and
// one bookkeeping record per session (keySpanMeta+session). So a session's spans survive
// a restart and any API replica reads them.

const (
	keySpan     = "sspan/"
	keySpanMeta = "sspanmeta/"
)

// SpanRecord is one span of a session's record (the T1 JSON of the console contract).
type SpanRecord struct {
	Seq          int64          `json:"seq"`
	TraceID      string         `json:"trace_id"`
	SpanID       string         `json:"span_id"`
	ParentSpanID string         `json:"parent_span_id"`
	Name         string         `json:"name"`
	Start        time.Time      `json:"start"`
	End          time.Time      `json:"end"`
	DurationMs   float64        `json:"duration_ms"`
	Status       string         `json:"status"` // "ok" | "error"
	Error        string         `json:"error,omitempty"`
	Attributes   map[string]any `json:"attributes"`
}

// spanMeta is a session's span bookkeeping: its spans are the keys of seq [First, Next).
type spanMeta struct {
	Session string    `json:"session"`
	Tenant  string    `json:"tenant"`
	First   int64     `json:"first"`
	Next    int64     `json:"next"`
	Dropped int64     `json:"dropped"` // spans removed by limits.max_spans_per_session
	Touched time.Time `json:"touched"` // the last span's arrival (the eviction order)
}

// spanLog is the recorder's state: the queue of ended spans, and the bookkeeping of every
// traced session (restored from the store at start).
type spanLog struct {
	st          store.Store
	log         *slog.Logger
	now         func() time.Time
	dropped     metric.Int64Counter // tuft.session_spans.dropped
	perSession  int                 // limits.max_spans_per_session
	perTenant   int                 // limits.max_traced_sessions_per_tenant
	owners      func([]telemetry.SessionSpan) []string
	writeFailed func(ctx context.Context, reason string, err error, args ...any)

	mu     sync.Mutex
	queue  []telemetry.SessionSpan
	queued map[string]int // spans in the queue by tenant (each at most limits.max_spans_per_session)
	lost   int64          // spans that found their tenant's share of the queue full since the last drain
	kick   chan struct{}
	// work serialises draining (the recorder goroutine and a reader that drains first).
	work sync.Mutex
	meta map[string]*spanMeta // session id → bookkeeping
}

// newSpanLog records spans to st; owners names each span's session on this replica ("":
// none, the span is not recorded).
func newSpanLog(st store.Store, log *slog.Logger, now func() time.Time, dropped metric.Int64Counter, limits config.Limits,
	owners func([]telemetry.SessionSpan) []string, writeFailed func(ctx context.Context, reason string, err error, args ...any)) spanLog {
	return spanLog{st: st, log: log, now: now, dropped: dropped, perSession: limits.MaxSpansPerSession,
		perTenant: limits.MaxTracedSessionsPerTenant, owners: owners, writeFailed: writeFailed,
		queued: map[string]int{}, kick: make(chan struct{}, 1), meta: map[string]*spanMeta{}}
}

func spanKey(session string, seq int64) string {
	return fmt.Sprintf("%s%s/%016x", keySpan, session, seq)
}

// RecordSessionSpan queues one ended span for the session record. It never blocks and
// takes no service lock. At most limits.max_spans_per_session spans of one tenant wait;
// more are dropped (logged and counted), so one tenant's burst never costs another's spans.
func (s *Service) RecordSessionSpan(sp telemetry.SessionSpan) { s.spans.record(sp) }

// record queues sp (RecordSessionSpan).
func (l *spanLog) record(sp telemetry.SessionSpan) {
	l.mu.Lock()
	if l.queued[sp.Tenant] >= l.perSession {
		l.lost++
		l.mu.Unlock()
		return
	}
	if l.queued == nil {
		l.queued = map[string]int{}
	}
	l.queued[sp.Tenant]++
	l.queue = append(l.queue, sp)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// recorder writes queued spans until stop closes.
func (l *spanLog) recorder(stop <-chan struct{}, done func()) {
	defer done()
	for {
		select {
		case <-stop:
			l.drain(context.Background())
			return
		case <-l.kick:
		}
		time.Sleep(flushDelay) // let the spans of one request join one commit
		l.drain(context.Background())
	}
}

// restore reads the bookkeeping of every traced session.
func (l *spanLog) restore(ctx context.Context) error {
	return loadAll(ctx, l.st, keySpanMeta, l.log, func(m *spanMeta) { l.meta[m.Session] = m })
}

// drain records the queued spans in one store commit. The context is not a request's:
// the store's own spans of this write belong to no session.
func (l *spanLog) drain(ctx context.Context) {
	l.work.Lock()
	defer l.work.Unlock()
	l.mu.Lock()
	batch, lost := l.queue, l.lost
	l.queue, l.lost = nil, 0
	clear(l.queued)
	l.mu.Unlock()
	if lost > 0 {
		l.log.Warn("session spans dropped: a tenant's share of the recorder's queue was full", "spans", lost, "limit", "limits.max_spans_per_session")
		l.dropped.Add(ctx, lost, telemetry.AddAttrs(telemetry.MAttrReason, telemetry.SpanDropQueueFull)...)
	}
	if len(batch) == 0 {
		return
	}
	owners := l.owners(batch)
	var ops []store.Op
	touched := map[string]*spanMeta{}
	now := l.now()
	for i, sp := range batch {
		sess := owners[i]
		if sess == "" {
			continue
		}
		m := l.meta[sess]
		if m == nil {
			ops = append(ops, l.evict(ctx, sp.Tenant, touched)...)
			m = &spanMeta{Session: sess, Tenant: sp.Tenant}
			l.meta[sess] = m
		}
		b, err := json.Marshal(spanRecordOf(m.Next, sp))
		if err != nil {
			l.log.Error("encode session span", "session", sess, "span", sp.Name, "error", err)
			continue
		}
		ops = append(ops, store.Op{Key: spanKey(sess, m.Next), Value: b})
		m.Next++
		for m.Next-m.First > int64(l.perSession) {
			ops = append(ops, store.Op{Key: spanKey(sess, m.First)})
			m.First++
			m.Dropped++
			l.dropped.Add(ctx, 1, telemetry.AddAttrs(telemetry.MAttrReason, telemetry.SpanDropSessionBound)...)
		}
		m.Touched = now
		touched[sess] = m
	}
	for sess, m := range touched {
		if l.meta[sess] == nil {
			continue // evicted within this batch: its delete is in ops
		}
		b, _ := json.Marshal(m) // plain fields: cannot fail
		ops = append(ops, store.Op{Key: keySpanMeta + sess, Value: b})
	}
	if len(ops) == 0 {
		return
	}
	if err := l.st.Apply(ctx, ops); err != nil {
		l.writeFailed(ctx, reasonSessionSpans, err, "spans", len(batch))
	}
}

// evict makes room for one more traced session of tenant: at
// limits.max_traced_sessions_per_tenant, the least recently traced one's spans go.
func (l *spanLog) evict(ctx context.Context, tenant string, touched map[string]*spanMeta) []store.Op {
	var oldest *spanMeta
	n := 0
	for _, m := range l.meta {
		if m.Tenant != tenant {
			continue
		}
		n++
		if oldest == nil || m.Touched.Before(oldest.Touched) {
			oldest = m
		}
	}
	if n < l.perTenant || oldest == nil {
		return nil
	}
	l.dropped.Add(ctx, oldest.Next-oldest.First, telemetry.AddAttrs(telemetry.MAttrReason, telemetry.SpanDropSessionEvicted)...)
	delete(l.meta, oldest.Session)
	delete(touched, oldest.Session)
	ops := []store.Op{{Key: keySpanMeta + oldest.Session}}
	for q := oldest.First; q < oldest.Next; q++ {
		ops = append(ops, store.Op{Key: spanKey(oldest.Session, q)})
	}
	return ops
}

func spanRecordOf(seq int64, sp telemetry.SessionSpan) SpanRecord {
	r := SpanRecord{Seq: seq, TraceID: sp.TraceID, SpanID: sp.SpanID, ParentSpanID: sp.ParentSpanID, Name: sp.Name,
		Start: sp.Start.UTC(), End: sp.End.UTC(), DurationMs: float64(sp.End.Sub(sp.Start).Microseconds()) / 1000,
		Status: "ok", Attributes: sp.Attributes}
	if sp.Error {
		r.Status, r.Error = "error", sp.StatusMessage
	}
	if r.Attributes == nil {
		r.Attributes = map[string]any{}
	}
	return r
}

// RecordsSessionSpans reports whether this server keeps session spans (sessions.record_spans).
func (s *Service) RecordsSessionSpans() bool { return s.cfg.Sessions.RecordSpans }

// SessionSpans are a session's recorded spans, oldest first, and how many older ones the
// bound dropped.
type SessionSpans struct {
	Spans   []SpanRecord
	Dropped int64
}

// SessionSpans reads the span record of tenant's session (not found for another
// tenant's). Spans still queued are written first, so a reader sees every span that ended
// before its call.
func (s *Service) SessionSpans(ctx context.Context, tenant, id string) (SessionSpans, error) {
	if err := s.ownSession(tenant, id); err != nil {
		return SessionSpans{}, err
	}
	s.spans.drain(context.WithoutCancel(ctx))
	out := SessionSpans{Spans: []SpanRecord{}}
	s.spans.work.Lock()
	if m := s.spans.meta[id]; m != nil {
		out.Dropped = m.Dropped
	}
	s.spans.work.Unlock()
	var bad error
	err := s.st.Scan(ctx, keySpan+id+"/", func(key string, v []byte) error {
		var r SpanRecord
		if err := json.Unmarshal(v, &r); err != nil {
			bad = fmt.Errorf("unreadable span record %s: %w", key, err)
			return nil
		}
		out.Spans = append(out.Spans, r)
		return nil
	})
	if err != nil {
		return SessionSpans{}, classify(err)
	}
	if bad != nil {
		s.log.WarnContext(ctx, "skipping a session span", "error", bad)
	}
	// The Redis store scans in no order; seq is the arrival order.
	sort.Slice(out.Spans, func(i, j int) bool { return out.Spans[i].Seq < out.Spans[j].Seq })
	return out, nil
}

// ownSession checks that tenant owns session id: not found otherwise, exactly as for a
// missing one.
func (s *Service) ownSession(tenant, id string) error {
	if id == "" || strings.Contains(id, "/") {
		return notFoundf("session %q not found", id)
	}
	s.lock(lkSessions)
	_, err := s.sessions.owned(tenant, id)
	s.unlock(lkSessions)
	return s.settle(err)
}

// traceTokenTag separates trace-export tokens from archive tokens (a tinker:// path) and
// file tokens (fileTokenTag).
const traceTokenTag = "trace\x00"

// TraceToken signs a link to the Perfetto export of tenant's session, valid for ttl.
func (s *Service) TraceToken(tenant, id string, ttl time.Duration) (string, time.Time, error) {
	if err := s.ownSession(tenant, id); err != nil {
		return "", time.Time{}, err
	}
	exp := s.now().Add(ttl).Truncate(time.Second)
	return s.tokens.sign(exp, traceTokenTag+tenant+"\x00"+id), exp, nil
}

// OpenTraceToken verifies a trace-export token and reads the span record it grants.
func (s *Service) OpenTraceToken(ctx context.Context, tok string) (session string, spans SessionSpans, err error) {
	payload, err := s.tokens.verify(tok)
	if err != nil {
		return "", SessionSpans{}, err
	}
	rest, ok := strings.CutPrefix(payload, traceTokenTag)
	if !ok {
		return "", SessionSpans{}, ErrBadToken
	}
	tenant, id, ok := strings.Cut(rest, "\x00")
	if !ok {
		return "", SessionSpans{}, ErrBadToken
	}
	spans, err = s.SessionSpans(ctx, tenant, id)
	return id, spans, err
}
