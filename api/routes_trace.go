package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/service"
)

// A session's span record (sessions.record_spans; docs/observability.md, "Session
// spans"): as JSON for the console, and as a Perfetto trace behind a signed link for SDK
// 0.38's RestClient.export_session_trace.

func (h *Handler) sessionSpans(w http.ResponseWriter, r *http.Request, tenant string) {
	id := r.PathValue("session_id")
	ss, err := h.svc.SessionSpans(r.Context(), tenant, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	resp := wire.SessionSpansResponse{SessionID: id, Spans: make([]wire.SessionSpan, len(ss.Spans)), Dropped: ss.Dropped}
	for i, sp := range ss.Spans {
		resp.Spans[i] = wire.SessionSpan{Seq: sp.Seq, TraceID: sp.TraceID, SpanID: sp.SpanID, ParentSpanID: sp.ParentSpanID,
			Name: sp.Name, Start: sp.Start, End: sp.End, DurationMs: sp.DurationMs, Status: sp.Status, Error: sp.Error,
			Attributes: sp.Attributes}
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, resp)
}

// traceExport answers the SDK's poll: the trace is built when its link is fetched, from
// the record as it is then, so the export is ready at once (never "pending"). A server
// that records no session spans, holding none for this session, answers "failed" naming the
// key (the SDK raises it), rather than a link to an empty trace.
func (h *Handler) traceExport(w http.ResponseWriter, r *http.Request, tenant string) {
	id := r.PathValue("session_id")
	tok, exp, err := h.svc.TraceToken(tenant, id, h.opt.ArchiveTTL)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !h.svc.RecordsSessionSpans() {
		ss, err := h.svc.SessionSpans(r.Context(), tenant, id)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if len(ss.Spans) == 0 {
			msg := "no spans are recorded for session " + id + ": this server keeps session spans only with sessions.record_spans: true in its config"
			textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.TraceExportResponse{Status: "failed", Error: &msg})
			return
		}
	}
	link := h.base(r) + "/api/v1/session_trace/" + url.PathEscape(tok)
	w.Header().Set("Expires", exp.UTC().Format(http.TimeFormat))
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.TraceExportResponse{Status: "ready", URL: &link})
}

// traceDownload serves the Perfetto trace a valid signed link grants (no API key: the link
// is the credential, as for archives).
func (h *Handler) traceDownload(w http.ResponseWriter, r *http.Request) {
	session, ss, err := h.svc.OpenTraceToken(r.Context(), r.PathValue("token"))
	if err != nil {
		if errors.Is(err, service.ErrBadToken) {
			textgen.WriteJSON(w, encodingFailed, http.StatusForbidden, errorBody{Detail: err.Error(), Category: "user"})
			return
		}
		h.fail(w, r, err)
		return
	}
	b := perfettoTrace(session, ss.Spans)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", session+".pftrace"))
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	if _, err := w.Write(b); err != nil {
		h.log.WarnContext(r.Context(), "trace download failed", "session", session, "error", err)
	}
}
