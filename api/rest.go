package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"unicode"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
)

func checkpointWire(c service.Checkpoint) wire.Checkpoint {
	size := c.SizeBytes
	return wire.Checkpoint{CheckpointID: c.ID(), CheckpointType: c.Type, Time: c.CreatedAt.UTC(), TinkerPath: c.TinkerPath(),
		SizeBytes: &size, Public: c.Public, ExpiresAt: c.ExpiresAt, UserMetadata: c.UserMetadata}
}

func runWire(v service.RunView) wire.TrainingRun {
	rank := v.Lora.Rank
	tr := wire.TrainingRun{TrainingRunID: v.ID, BaseModel: v.BaseModel, ModelOwner: v.Tenant, IsLora: true,
		Corrupted: v.State == service.RunCorrupted, LoraRank: &rank, LastRequestTime: v.LastRequestTime.UTC(), UserMetadata: stringMetadata(v.UserMetadata),
		Steps: v.Steps, LastLoss: v.LastLoss, State: string(v.State), SessionID: v.SessionID, CreatedAt: v.CreatedAt.UTC()}
	if v.LastCheckpointRec != nil {
		c := checkpointWire(*v.LastCheckpointRec)
		tr.LastCheckpoint = &c
	}
	if v.LastSamplerRec != nil {
		c := checkpointWire(*v.LastSamplerRec)
		tr.LastSamplerCheckpoint = &c
	}
	return tr
}

func (h *Handler) listRuns(w http.ResponseWriter, r *http.Request, tenant string) {
	limit, offset, ok := h.page(w, r, 20, 1000)
	if !ok {
		return
	}
	runs, total := h.svc.ListRuns(r.Context(), tenant, limit, offset)
	resp := wire.TrainingRunsResponse{TrainingRuns: []wire.TrainingRun{}, Cursor: wire.Cursor{Offset: offset, Limit: limit, TotalCount: total}}
	for _, v := range runs {
		resp.TrainingRuns = append(resp.TrainingRuns, runWire(v))
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, resp)
}

func (h *Handler) getRun(w http.ResponseWriter, r *http.Request, tenant string) {
	v, err := h.svc.GetRun(tenant, r.PathValue("run_id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, runWire(v))
}

func (h *Handler) listRunCheckpoints(w http.ResponseWriter, r *http.Request, tenant string) {
	cs, err := h.svc.ListCheckpoints(tenant, r.PathValue("run_id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	resp := wire.CheckpointsListResponse{Checkpoints: []wire.Checkpoint{}}
	for _, c := range cs {
		resp.Checkpoints = append(resp.Checkpoints, checkpointWire(c))
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, resp)
}

func (h *Handler) listCheckpoints(w http.ResponseWriter, r *http.Request, tenant string) {
	limit, offset, ok := h.page(w, r, 100, 10000)
	if !ok {
		return
	}
	cs, total := h.svc.ListAllCheckpoints(r.Context(), tenant, limit, offset)
	resp := wire.CheckpointsListResponse{Checkpoints: []wire.Checkpoint{}, Cursor: &wire.Cursor{Offset: offset, Limit: limit, TotalCount: total}}
	for _, c := range cs {
		resp.Checkpoints = append(resp.Checkpoints, checkpointWire(c))
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, resp)
}

// splitCkpt separates a checkpoint id from a trailing action ("weights/x/publish").
func splitCkpt(tail string) (id, action string) {
	for _, a := range []string{"publish", "ttl", "archive", "external_weights_urls"} {
		if strings.HasSuffix(tail, "/"+a) {
			return strings.TrimSuffix(tail, "/"+a), a
		}
	}
	return tail, ""
}

func (h *Handler) checkpointDelete(w http.ResponseWriter, r *http.Request, tenant string) {
	id, action := splitCkpt(r.PathValue("ckpt"))
	var err error
	switch action {
	case "":
		err = h.svc.DeleteCheckpoint(r.Context(), tenant, r.PathValue("run_id"), id)
	case "publish":
		err = h.svc.SetPublic(r.Context(), tenant, r.PathValue("run_id"), id, false)
	default:
		h.fail(w, r, &service.Error{Kind: service.KindNotFound, Msg: "no route DELETE " + r.URL.Path})
		return
	}
	h.empty(w, r, err)
}

func (h *Handler) checkpointPost(w http.ResponseWriter, r *http.Request, tenant string) {
	id, action := splitCkpt(r.PathValue("ckpt"))
	if action != "publish" {
		h.fail(w, r, &service.Error{Kind: service.KindNotFound, Msg: "no route POST " + r.URL.Path})
		return
	}
	h.empty(w, r, h.svc.SetPublic(r.Context(), tenant, r.PathValue("run_id"), id, true))
}

func (h *Handler) checkpointPut(w http.ResponseWriter, r *http.Request, tenant string) {
	id, action := splitCkpt(r.PathValue("ckpt"))
	if action != "ttl" {
		h.fail(w, r, &service.Error{Kind: service.KindNotFound, Msg: "no route PUT " + r.URL.Path})
		return
	}
	var req wire.CheckpointTTLRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	h.empty(w, r, h.svc.SetTTL(r.Context(), tenant, r.PathValue("run_id"), id, req.TTLSeconds))
}

func (h *Handler) empty(w http.ResponseWriter, r *http.Request, err error) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// checkpointGet answers the archive route with a 302 to a signed link on this server.
func (h *Handler) checkpointGet(w http.ResponseWriter, r *http.Request, tenant string) {
	id, action := splitCkpt(r.PathValue("ckpt"))
	if action == "external_weights_urls" {
		h.externalWeightsURLs(w, r, tenant, r.PathValue("run_id"), id)
		return
	}
	if action != "archive" {
		h.fail(w, r, &service.Error{Kind: service.KindNotFound, Msg: "no route GET " + r.URL.Path})
		return
	}
	// ?format= (and ?quant=) ask for an export (docs/export.md) instead of the tar of the
	// checkpoint's files; an unknown one is a 400 before any link is signed. The link's
	// token grants the checkpoint; the format rides along in its query.
	format, quant := r.URL.Query().Get("format"), r.URL.Query().Get("quant")
	if err := service.CheckExport(format, quant); err != nil {
		h.fail(w, r, err)
		return
	}
	tok, exp, err := h.svc.ArchiveToken(r.Context(), tenant, r.PathValue("run_id"), id, format, h.opt.ArchiveTTL)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	link := h.base(r) + "/api/v1/archive/" + url.PathEscape(tok)
	if format != "" {
		q := url.Values{"format": {format}}
		if quant != "" {
			q.Set("quant", quant)
		}
		link += "?" + q.Encode()
	}
	w.Header().Set("Location", link)
	w.Header().Set("Expires", exp.UTC().Format(http.TimeFormat))
	w.WriteHeader(http.StatusFound)
}

// archiveDownload streams a tar of the checkpoint directory for a valid signed token, or
// with ?format= a tar of the checkpoint exported in that format.
func (h *Handler) archiveDownload(w http.ResponseWriter, r *http.Request) {
	var c *service.Archive
	var err error
	if format, quant := r.URL.Query().Get("format"), r.URL.Query().Get("quant"); format != "" || quant != "" {
		c, err = h.svc.OpenExport(r.Context(), r.PathValue("token"), format, quant)
	} else {
		c, err = h.svc.OpenArchive(r.PathValue("token"))
	}
	if err == nil {
		defer c.Close()
	}
	if err != nil {
		if errors.Is(err, service.ErrBadToken) {
			textgen.WriteJSON(w, encodingFailed, http.StatusForbidden, errorBody{Detail: err.Error(), Category: "user"})
			return
		}
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", c.FileName()))
	if _, err := c.WriteTo(w); err != nil {
		// Headers are sent; the truncated tar fails the client's extraction.
		h.log.WarnContext(r.Context(), "archive stream failed", "checkpoint", c.Checkpoint.TinkerPath(), "error", err)
	}
}

func (h *Handler) listSessions(w http.ResponseWriter, r *http.Request, tenant string) {
	limit, offset, ok := h.page(w, r, 20, 1000)
	if !ok {
		return
	}
	ids := h.svc.ListSessions(r.Context(), tenant, limit, offset)
	if ids == nil {
		ids = []string{}
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.ListSessionsResponse{Sessions: ids})
}

func (h *Handler) getSession(w http.ResponseWriter, r *http.Request, tenant string) {
	v, err := h.svc.SessionInfo(tenant, r.PathValue("session_id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	resp := wire.GetSessionResponse{TrainingRunIDs: v.Runs, SamplerIDs: v.Samplers, UserMetadata: stringMetadata(v.UserMetadata),
		Status: sessionStatus(&v.Session)}
	if resp.TrainingRunIDs == nil {
		resp.TrainingRunIDs = []string{}
	}
	if resp.SamplerIDs == nil {
		resp.SamplerIDs = []string{}
	}
	if v.DisplayName != "" {
		resp.DisplayName = &v.DisplayName
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, resp)
}

// sessionStatus is a session's status in the SDK's SessionStatus shape.
func sessionStatus(se *service.Session) wire.SessionStatus {
	switch {
	case se.Finished != nil:
		return wire.SessionStatus{Type: "client_finished", Reason: &wire.FinishReason{Type: se.Finished.Reason}, Detail: se.Finished.Detail}
	case se.Expired:
		d := "expired: no heartbeat for longer than sessions.heartbeat_timeout_seconds"
		return wire.SessionStatus{Type: "cancelled", Detail: &d}
	}
	return wire.SessionStatus{Type: "active"}
}

// stringMetadata shows user metadata as the SDK's dict[str, str]: strings as they are,
// other JSON values in their JSON form.
func stringMetadata(md service.Metadata) map[string]string {
	m := md.Map()
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			b = []byte(fmt.Sprint(v))
		}
		out[k] = string(b)
	}
	return out
}

// finishSession is ServiceClient.close() (SDK >= 0.27.2) and the end of a `with
// ServiceClient()` block (>= 0.29.1): the first finish reason wins; afterwards the
// session's operations and heartbeats get 410 and its resources are released.
func (h *Handler) finishSession(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.FinishSessionRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	id := r.PathValue("session_id")
	r = annotate(r, telemetry.Keys{SessionID: id})
	if req.Reason == nil {
		h.badRequest(w, r, fmt.Errorf("reason is required: {\"type\": \"success\" | \"errored\" | \"interrupted\"}"))
		return
	}
	f, err := h.svc.FinishSession(r.Context(), tenant, id, req.Reason.Type, req.Detail)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.FinishSessionResponse{SessionID: id,
		Status: wire.SessionStatus{Type: "client_finished", Reason: &wire.FinishReason{Type: f.Reason}, Detail: f.Detail}})
}

func (h *Handler) setSessionProject(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.SessionProjectRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	h.empty(w, r, h.svc.SetSessionProject(r.Context(), tenant, r.PathValue("session_id"), req.ProjectID))
}

// recordClientTelemetry turns the SDK's telemetry events into log records correlated
// with the client's session, instead of throwing them away: an unhandled client
// exception shows up next to the server spans of the same session. What a client sends
// is bounded (limits.max_client_events per request, limits.max_client_event_bytes per
// field) and stripped of control characters; every record says source=tinker-sdk, so a
// client's ERROR (an unhandled exception, see docs/observability.md) is told apart from
// the server's.
func (h *Handler) recordClientTelemetry(ctx context.Context, tenant string, req *wire.TelemetrySendRequest) {
	ctx = telemetry.WithKeys(ctx, telemetry.Keys{SessionID: req.SessionID})
	max := h.opt.Limits.MaxClientEventBytes
	clean := func(v string) string { return cleanClientText(v, max) }
	events := req.Events
	if n := h.opt.Limits.MaxClientEvents; len(events) > n {
		h.log.LogAttrs(ctx, slog.LevelWarn, "client telemetry: events dropped", slog.String("tenant", tenant),
			slog.Int("dropped", len(events)-n), slog.String("limit", "limits.max_client_events"))
		events = events[:n]
	}
	for _, ev := range events {
		level := slog.LevelInfo
		switch strings.ToUpper(ev.Severity) {
		case "DEBUG":
			level = slog.LevelDebug
		case "WARNING":
			level = slog.LevelWarn
		case "ERROR", "CRITICAL":
			level = slog.LevelError
		}
		attrs := []slog.Attr{
			slog.String(telemetry.LogSource, "tinker-sdk"), slog.String(telemetry.LogTenant, tenant),
			slog.String(telemetry.AttrSessionID, clean(req.SessionID)), slog.String(telemetry.LogClientEvent, clean(ev.Event)),
			slog.String(telemetry.LogClientEventID, clean(ev.EventID)), slog.String(telemetry.LogClientPlatform, clean(req.Platform)),
			slog.String(telemetry.LogClientSDKVersion, clean(req.SDKVersion)), slog.String(telemetry.LogClientProcessUUID, clean(req.ProcessUUID)),
			slog.String(telemetry.LogClientSeverity, clean(ev.Severity)),
		}
		if !ev.Timestamp.IsZero() {
			attrs = append(attrs, slog.Time(telemetry.LogClientTimestamp, ev.Timestamp))
		}
		msg := "client event " + clean(ev.Event)
		switch ev.Event {
		case "UNHANDLED_EXCEPTION":
			msg = "client unhandled exception: " + clean(ev.ErrorType) + ": " + clean(ev.ErrorMessage)
			attrs = append(attrs, slog.String(telemetry.LogExceptionType, clean(ev.ErrorType)), slog.String(telemetry.LogExceptionMessage, clean(ev.ErrorMessage)),
				slog.String(telemetry.LogExceptionTrace, clean(ev.Traceback)))
			level = slog.LevelError
		case "GENERIC_EVENT":
			msg = "client event " + clean(ev.EventName)
			attrs = append(attrs, slog.String(telemetry.LogClientEventName, clean(ev.EventName)))
			if len(ev.EventData) > 0 {
				attrs = append(attrs, slog.String(telemetry.LogClientEventData, clean(string(ev.EventData))))
			}
		case "SESSION_END":
			if ev.Duration != "" {
				attrs = append(attrs, slog.String(telemetry.LogClientDuration, clean(ev.Duration)))
			}
		}
		h.log.LogAttrs(ctx, level, msg, attrs...)
	}
}

// cleanClientText drops control characters (but newlines and tabs) from text a client
// sent, and cuts it to max bytes.
func cleanClientText(s string, max int) string {
	cut := 0
	if len(s) > max {
		cut = len(s) - max
		s = s[:max]
	}
	s = strings.ToValidUTF8(s, "") // also drops a rune the cut split
	clean := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || !unicode.IsControl(r) {
			return r
		}
		return -1
	}, s)
	if cut > 0 {
		clean += fmt.Sprintf("…(%d bytes cut)", cut)
	}
	return clean
}

// page reads the limit and offset query parameters, answering 400 itself when they are bad.
func (h *Handler) page(w http.ResponseWriter, r *http.Request, defLimit, maxLimit int) (limit, offset int, ok bool) {
	limit, err := queryInt(r, "limit", defLimit, maxLimit)
	if err == nil {
		offset, err = queryInt(r, "offset", 0, 1<<30)
	}
	if err != nil {
		h.badRequest(w, r, err)
		return 0, 0, false
	}
	return limit, offset, true
}
