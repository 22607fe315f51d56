package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/service"
)

// The console's data routes (issue 27, docs/compatibility.md "Console data"): a run's
// metric history, read whole or streamed as server-sent events; the tenant's usage and
// quotas; its billing events (the SDK's AdminClient); the operator's overview.

// metricsPageMax bounds the points of one GET /metrics reply; a client pages on with
// next_after. It is a size of the reply format, like the REST lists' page bound.
const metricsPageMax = 10000

// metricsHeartbeat is how often a quiet metric stream sends a comment line: the
// contract with the console (docs/compatibility.md), under the idle timeouts of the
// usual proxies.
const metricsHeartbeat = 15 * time.Second

func (h *Handler) consoleRoutes(a func(pattern string, f func(w http.ResponseWriter, r *http.Request, tenant string))) {
	h.table.handle("GET /api/v1/admin/overview", routeInfo{operator: true}, h.authed(h.adminOverview))
	a("GET /api/v1/training_runs/{run_id}/metrics", h.runMetrics)
	a("GET /api/v1/training_runs/{run_id}/metrics/stream", h.runMetricsStream)
	a("GET /api/v1/usage", h.usage)
	a("GET /api/v1/billing/usage/events", h.billingEvents)
}

func metricPointWire(p service.MetricPoint) wire.MetricPoint {
	return wire.MetricPoint{Seq: p.Seq, Step: p.Step, Op: p.Op, Time: p.Time.UTC().Format(time.RFC3339Nano), Metrics: p.Metrics,
		NonFinite: p.NonFinite, SeqID: p.SeqID}
}

// queryInt64 reads an optional non-negative integer query parameter (def when absent).
func queryInt64(r *http.Request, name string, def, max int64) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > max {
		return 0, invalid(fmt.Errorf("query parameter %s=%q must be an integer in [0, %d]", name, s, max))
	}
	return n, nil
}

func (h *Handler) runMetrics(w http.ResponseWriter, r *http.Request, tenant string) {
	after, err := queryInt64(r, "after", 0, 1<<62)
	if err == nil {
		var limit int64
		limit, err = queryInt64(r, "limit", metricsPageMax, metricsPageMax)
		if err == nil && limit == 0 {
			err = invalid(fmt.Errorf("query parameter limit=0 must be at least 1"))
		}
		if err == nil {
			var pg service.MetricPage
			if pg, err = h.svc.RunMetrics(tenant, r.PathValue("run_id"), after, int(limit)); err == nil {
				resp := wire.RunMetricsResponse{RunID: pg.RunID, Points: make([]wire.MetricPoint, 0, len(pg.Points)), NextAfter: pg.NextAfter,
					Dropped: pg.Dropped, Ended: pg.Ended}
				for _, p := range pg.Points {
					resp.Points = append(resp.Points, metricPointWire(p))
				}
				textgen.WriteJSON(w, encodingFailed, http.StatusOK, resp)
				return
			}
		}
	}
	h.fail(w, r, err)
}

// runMetricsStream sends the run's points after ?after= (or after the Last-Event-ID a
// reconnecting EventSource sends, which wins), then each new one as it is recorded: "id:
// <seq>", "event: point", the point as data. A comment line every metricsHeartbeat keeps
// a quiet stream alive; "event: end" closes it once the run is unloaded or corrupted.
// Once started the stream holds a stream slot instead of a request slot (detachStream),
// so an open console does not count against the tenant's concurrent requests.
func (h *Handler) runMetricsStream(w http.ResponseWriter, r *http.Request, tenant string) {
	after, err := queryInt64(r, "after", 0, 1<<62)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, perr := strconv.ParseInt(id, 10, 64)
		if perr != nil || n < 0 {
			h.fail(w, r, invalid(fmt.Errorf("header Last-Event-ID %q must be a point's seq (a non-negative integer)", id)))
			return
		}
		after = n
	}
	runID := r.PathValue("run_id")
	pg, err := h.svc.RunMetrics(tenant, runID, after, metricsPageMax)
	if err != nil {
		h.fail(w, r, err) // a missing or another tenant's run: 404 before the stream starts
		return
	}
	if t := ticketFrom(r.Context()); t != nil {
		release, err := t.detachStream()
		if err != nil {
			h.fail(w, r, err)
			return
		}
		defer release()
	}
	h.ins.MetricStreamsActive.Add(r.Context(), 1)
	defer h.ins.MetricStreamsActive.Add(context.WithoutCancel(r.Context()), -1)
	sse := textgen.NewSSE(w)
	beat := time.NewTicker(metricsHeartbeat)
	defer beat.Stop()
	if err := sse.Comment("metrics of " + runID); err != nil { // the 200 and headers, at once
		return
	}
	for {
		for _, p := range pg.Points {
			b, err := json.Marshal(metricPointWire(p))
			if err != nil {
				return
			}
			if err := sse.EventID(strconv.FormatInt(p.Seq, 10), "point", b); err != nil {
				return // the client went away
			}
		}
		after = pg.NextAfter
		if len(pg.Points) == 0 {
			if pg.Ended {
				_ = sse.Event("end", []byte(`{"run_id":`+strconv.Quote(runID)+`}`))
				return
			}
			select {
			case <-pg.Changed:
			case <-beat.C:
				if err := sse.Comment("heartbeat"); err != nil {
					return
				}
			case <-r.Context().Done():
				return
			case <-h.closing: // the server is shutting down; the client reconnects with Last-Event-ID
				return
			}
		}
		if pg, err = h.svc.RunMetrics(tenant, runID, after, metricsPageMax); err != nil {
			return // the run's record left this replica
		}
	}
}

// billingWindowMax is the longest window of one GET /billing/usage/events: the SDK's
// documented bound (GetBillingUsageRequest.ending_before: "at most 14 days after
// starting_on").
const billingWindowMax = 14 * 24 * time.Hour

// usageReport is the tenant's usage over its last days, with the quotas the HTTP layer
// counts (requests, bodies, streams) after the service's.
func (h *Handler) usageReport(r *http.Request, tenant string, days int) (wire.UsageResponse, error) {
	rep, err := h.svc.TenantUsage(r.Context(), tenant, days)
	if err != nil {
		return wire.UsageResponse{}, err
	}
	out := wire.UsageResponse{Days: make([]wire.UsageDay, 0, len(rep.Days)), AdapterMemoryBytes: rep.AdapterMemoryBytes, DiskBytes: rep.DiskBytes}
	for _, d := range rep.Days {
		out.Days = append(out.Days, wire.UsageDay{Day: d.Day, TokensTrained: d.TokensTrained, TokensSampled: d.TokensSampled, TokensPrefilled: d.TokensPrefilled})
	}
	for _, q := range rep.Quotas {
		out.Quotas = append(out.Quotas, wire.QuotaUsage{Key: q.Key, Used: q.Used, Limit: q.Limit, Unit: q.Unit})
	}
	reqs, bytes, streams := h.adm.use(tenant)
	l := h.opt.Limits
	out.Quotas = append(out.Quotas,
		wire.QuotaUsage{Key: "limits.max_concurrent_requests_per_tenant", Used: int64(reqs), Limit: int64(l.MaxConcurrentPerTenant), Unit: "requests"},
		wire.QuotaUsage{Key: "limits.max_body_bytes_in_flight_per_tenant", Used: bytes, Limit: l.MaxBodyBytesPerTenant, Unit: "bytes"},
		wire.QuotaUsage{Key: "limits.max_metric_streams_per_tenant", Used: int64(streams), Limit: int64(l.MaxMetricStreamsPerTenant), Unit: "streams"})
	return out, nil
}

func (h *Handler) usage(w http.ResponseWriter, r *http.Request, tenant string) {
	days, err := queryInt64(r, "days", 0, 1<<20) // 0: the service's default
	if err == nil && days == 0 && r.URL.Query().Has("days") {
		err = invalid(fmt.Errorf("query parameter days=0 must be at least 1"))
	}
	if err == nil {
		var out wire.UsageResponse
		if out, err = h.usageReport(r, tenant, int(days)); err == nil {
			textgen.WriteJSON(w, encodingFailed, http.StatusOK, out)
			return
		}
	}
	h.fail(w, r, err)
}

// billingTime reads a required window bound: RFC 3339 (a time without an offset is
// UTC, as pydantic writes a naive datetime), on a UTC hour.
func billingTime(r *http.Request, name string) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, invalid(fmt.Errorf("query parameter %s is required (an RFC 3339 time on a UTC hour, e.g. 2026-11-27T00:00:00Z)", name))
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		if t, err = time.ParseInLocation("2006-01-02T15:04:05.999999999", v, time.UTC); err != nil {
			return time.Time{}, invalid(fmt.Errorf("query parameter %s=%q is not an RFC 3339 time", name, v))
		}
	}
	t = t.UTC()
	if !t.Equal(t.Truncate(time.Hour)) {
		return time.Time{}, invalid(fmt.Errorf("query parameter %s=%q must be aligned to a UTC hour boundary", name, v))
	}
	return t, nil
}

// billingEvents answers AdminClient.get_billing_usage: the tenant's hourly token usage
// in [starting_on, ending_before), priced by the billing.usd_per_* keys.
func (h *Handler) billingEvents(w http.ResponseWriter, r *http.Request, tenant string) {
	from, err := billingTime(r, "starting_on")
	var to time.Time
	if err == nil {
		to, err = billingTime(r, "ending_before")
	}
	if err == nil {
		switch now := time.Now(); {
		case !to.After(from):
			err = invalid(fmt.Errorf("ending_before %s must be after starting_on %s", to.Format(time.RFC3339), from.Format(time.RFC3339)))
		case to.Sub(from) > billingWindowMax:
			err = invalid(fmt.Errorf("the window from starting_on %s to ending_before %s is longer than 14 days", from.Format(time.RFC3339), to.Format(time.RFC3339)))
		case from.After(now):
			err = invalid(fmt.Errorf("starting_on %s is in the future", from.Format(time.RFC3339)))
		}
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	buckets, sessions, err := h.svc.BillingEvents(r.Context(), tenant, from, to)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := wire.BillingUsageResponse{Data: make([]wire.BillingUsageEvent, 0, len(buckets)), Sessions: map[string]wire.BillingUsageSession{}}
	for _, b := range buckets {
		out.Data = append(out.Data, h.billingEvent(b, tenant, sessions))
	}
	for id, se := range sessions {
		out.Sessions[id] = wire.BillingUsageSession{UserMetadata: stringMetadata(se.UserMetadata)}
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, out)
}

func (h *Handler) billingEvent(b service.UsageBucket, tenant string, sessions map[string]service.BillingSession) wire.BillingUsageEvent {
	ptr := func(s string) *string { return &s }
	ev := wire.BillingUsageEvent{BucketStart: b.Hour, BucketEnd: b.Hour.Add(time.Hour), UserID: ptr(tenant), UserName: ptr(tenant),
		EventInfo: wire.BillingEventInfo{Type: b.Kind}}
	if b.BaseModel != "" {
		ev.BaseModel = ptr(b.BaseModel)
	}
	if b.SessionID != "" {
		ev.SessionID = ptr(b.SessionID)
		if p := sessions[b.SessionID].ProjectID; p != "" {
			ev.ProjectID = ptr(p)
		}
	}
	if b.Kind == service.UsageStorage {
		gbh, rate, free := float64(b.Tokens)/1e9, h.svc.StorageRate(), false
		cost := rate * gbh / 720
		ev.EventInfo.GigabyteHours, ev.EventInfo.Free = &gbh, &free
		ev.EffectiveRateUSDPerGigabyteMonth, ev.EstimatedCostUSD = &rate, &cost
		return ev
	}
	n := b.Tokens
	ev.EventInfo.TokenCount = &n
	if b.Kind == service.UsagePrefill || b.Kind == service.UsagePrefillCached {
		cached := b.Kind == service.UsagePrefillCached
		ev.EventInfo.Type, ev.EventInfo.Cached = service.UsagePrefill, &cached
	}
	rate := h.svc.TokenRate(b.Kind)
	cost := rate * float64(b.Tokens) / 1e6
	ev.EffectiveRateUSDPerMillionTokens, ev.EstimatedCostUSD = &rate, &cost
	return ev
}

// quotaAlarm is the share of a quota past which the overview calls a tenant degraded.
const quotaAlarm = 0.9

// adminOverview answers the operator (the layers let no tenant key through): every
// tenant's usage today, queue depth and health.
func (h *Handler) adminOverview(w http.ResponseWriter, r *http.Request, _ string) {
	ov := h.svc.Overview()
	out := wire.AdminOverviewResponse{Tenants: []wire.TenantOverview{},
		Server: wire.ServerOverview{Status: "ok", SamplingBacklog: ov.Backlog, Replica: h.svc.ReplicaID()}}
	for _, t := range ov.Tenants {
		u, err := h.usageReport(r, t.Tenant, 1)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		reqs, _, streams := h.adm.use(t.Tenant)
		o := wire.TenantOverview{Tenant: t.Tenant, Health: "ok", Problems: []string{}, QueuedOperations: t.QueuedOperations, RequestsInFlight: reqs,
			MetricStreams: streams, RunsReady: t.RunsReady, RunsCorrupted: t.RunsCorrupted, SessionsOpen: t.SessionsOpen, Usage: u}
		if t.RunsCorrupted > 0 {
			o.Problems = append(o.Problems, fmt.Sprintf("%d corrupted training run(s)", t.RunsCorrupted))
		}
		for _, q := range u.Quotas {
			if q.Limit > 0 && float64(q.Used) >= quotaAlarm*float64(q.Limit) {
				o.Problems = append(o.Problems, fmt.Sprintf("%s: %d of %d %s used", q.Key, q.Used, q.Limit, q.Unit))
			}
		}
		if len(o.Problems) > 0 {
			o.Health = "degraded"
		}
		out.Tenants = append(out.Tenants, o)
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, out)
}
