package api

import (
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
// metric history, read whole or streamed as server-sent events.

// metricsPageMax bounds the points of one GET /metrics reply; a client pages on with
// next_after. It is a size of the reply format, like the REST lists' page bound.
const metricsPageMax = 10000

// metricsHeartbeat is how often a quiet metric stream sends a comment line: the
// contract with the console (docs/compatibility.md), under the idle timeouts of the
// usual proxies.
const metricsHeartbeat = 15 * time.Second

func (h *Handler) consoleRoutes(a func(pattern string, f func(w http.ResponseWriter, r *http.Request, tenant string))) {
	a("GET /api/v1/training_runs/{run_id}/metrics", h.runMetrics)
	a("GET /api/v1/training_runs/{run_id}/metrics/stream", h.runMetricsStream)
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
