package api

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
)

// Routes of SDK 0.26 – 0.38 around the account: copy_weights, sessions/search, the
// checkpoint storage report and the CLI's auth/apikey/me.

// copyWeights copies a checkpoint into a run of the caller's (synchronously). The
// X-Idempotency-Key the SDK reuses across retries makes a retry return the first copy.
func (h *Handler) copyWeights(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.CopyWeightsRequest
	body, ok := h.decode(w, r, &req)
	if !ok {
		return
	}
	if deref(req.WeightsAccessToken) != "" || r.Header.Get("X-Tinker-Weights-Access-Token") != "" {
		h.badRequest(w, r, fmt.Errorf("weights_access_token is not supported: this server shares checkpoints by publishing them (copy a published checkpoint without a token)"))
		return
	}
	if req.SourcePath == "" {
		h.badRequest(w, r, fmt.Errorf("source_path is required"))
		return
	}
	r = annotate(r, telemetry.Keys{SessionID: deref(req.SessionID), OperationType: telemetry.OpCopyWeights})
	p, err := h.svc.CopyWeights(r.Context(), tenant, service.CopyInput{SourcePath: req.SourcePath, SessionID: deref(req.SessionID),
		ModelSeqID: req.ModelSeqID, ProjectID: deref(req.DestinationProjectID), TTLSeconds: req.TTLSeconds,
		IdempotencyKey: r.Header.Get("X-Idempotency-Key"), PayloadHash: payloadHash(body)})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.CopyWeightsResponse{TinkerPath: p})
}

// searchSessions pages through the caller's sessions, newest first.
func (h *Handler) searchSessions(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.SessionSearchRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	q := service.SearchQuery{SessionID: deref(req.SessionID), DisplayName: deref(req.DisplayName), ProjectIDs: req.ProjectIDs,
		UserMetadata: req.UserMetadata, Limit: 50}
	if req.DisplayName != nil && strings.TrimSpace(*req.DisplayName) == "" {
		h.badRequest(w, r, fmt.Errorf("display_name must not be empty (leave it out to match every name)"))
		return
	}
	if req.Limit != nil {
		q.Limit = *req.Limit
	}
	if o := req.Owner; o != nil {
		q.OwnerType, q.OwnerURNs = o.Type, o.OwnerURNs
	}
	if req.Statuses != nil && len(req.Statuses) == 0 {
		h.badRequest(w, r, fmt.Errorf("statuses must not be empty (leave it out to match every status)"))
		return
	}
	for _, st := range req.Statuses {
		q.Statuses = append(q.Statuses, service.StatusQuery{Type: st.Type, Reasons: st.Reasons})
	}
	if c := req.Cursor; c != nil {
		q.After = &service.SearchCursor{CreatedAt: c.LastCreatedAt, SessionID: c.LastSessionID}
	}
	found, next, err := h.svc.SearchSessions(r.Context(), tenant, q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	resp := wire.SessionSearchResponse{Sessions: make([]wire.SessionSummary, 0, len(found))}
	for _, f := range found {
		st := sessionStatus(&f.Session)
		bytes := f.CheckpointBytes
		sum := wire.SessionSummary{SessionID: f.ID, CreatedAt: f.CreatedAt.UTC(), Owner: f.Tenant, ProjectID: service.ProjectOf(&f.Session),
			Status: &st, CheckpointsCount: f.CheckpointsCount, UserMetadata: stringMetadata(f.UserMetadata), CheckpointStorageBytes: &bytes}
		if f.DisplayName != "" {
			name := f.DisplayName
			sum.DisplayName = &name
		}
		resp.Sessions = append(resp.Sessions, sum)
	}
	if next != nil {
		resp.NextCursor = &wire.SessionSearchCursor{LastCreatedAt: next.CreatedAt.UTC(), LastSessionID: next.SessionID}
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, resp)
}

// checkpointStorage reports the caller's checkpoint storage per project, measured on
// disk (GET /billing/usage/checkpoints/current[?project_id=]). No cost: TuFT bills nothing.
func (h *Handler) checkpointStorage(w http.ResponseWriter, r *http.Request, tenant string) {
	for k := range r.URL.Query() {
		if k != "project_id" {
			h.badRequest(w, r, fmt.Errorf("query parameter %q is not supported (project_id is)", k))
			return
		}
	}
	resp := wire.CheckpointStorageUsageResponse{Data: []wire.CheckpointStorageUsageItem{}}
	for _, g := range h.svc.CheckpointUsage(tenant, r.URL.Query().Get("project_id")) {
		p, owner := g.ProjectID, tenant
		resp.Data = append(resp.Data, wire.CheckpointStorageUsageItem{ProjectID: &p, OrgUserURN: &owner, UserName: &owner,
			CheckpointCount: g.Count, SizeBytes: g.Bytes, SizeGigabytes: float64(g.Bytes) / 1e9})
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, resp)
}

// apiKeyMe describes the key the request presents (tinker auth login checks a key so).
func (h *Handler) apiKeyMe(w http.ResponseWriter, r *http.Request, tenant string) {
	k, ok := h.svc.APIKey(requestKey(r))
	if !ok {
		h.fail(w, r, &service.Error{Kind: service.KindUnauthorized, Msg: "invalid API key"})
		return
	}
	h.svc.AuditAPIKey(r.Context(), tenant, service.AuditAPIKeyRead, k.ID, "ok")
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.SelfAPIKeyResponse{KeyID: k.ID, Name: fmt.Sprintf("%s key %.12s", k.Tenant, k.Hash),
		Note:    "configured in the server's config (auth.api_keys, key_sha256 " + k.Hash + ")",
		Details: wire.APIKeyDetails{OrgDetails: wire.APIKeyOrgDetails{Name: k.Tenant}, UserDetails: wire.APIKeyUserDetails{Email: k.Tenant}}})
}

// deleteAPIKeyMe is tinker auth logout's revocation: refused, keys are configured.
func (h *Handler) deleteAPIKeyMe(w http.ResponseWriter, r *http.Request, tenant string) {
	err := h.svc.DeleteAPIKey(requestKey(r))
	if k, ok := h.svc.APIKey(requestKey(r)); ok {
		h.svc.AuditAPIKey(r.Context(), tenant, service.AuditAPIKeyDelete, k.ID, "refused")
	}
	h.fail(w, r, err)
}

// auditLog answers SDK 0.38's AdminClient.get_audit_log: the tenant's entries of one UTC
// day (default today), of event_type all (default), checkpoints, or projects, teams and
// organizations (none here).
func (h *Handler) auditLog(w http.ResponseWriter, r *http.Request, tenant string) {
	q := r.URL.Query()
	for k := range q {
		if k != "event_type" && k != "day" {
			h.badRequest(w, r, fmt.Errorf("query parameter %q is not supported by GET /api/v1/audit (event_type and day are)", k))
			return
		}
	}
	typ := q.Get("event_type")
	if typ == "" {
		typ = service.AuditAll
	}
	var day time.Time // zero: today (UTC)
	if v := q.Get("day"); v != "" {
		d, err := time.Parse(time.DateOnly, v)
		if err != nil {
			h.badRequest(w, r, fmt.Errorf("query parameter day=%q must be a date YYYY-MM-DD (UTC)", v))
			return
		}
		day = d
	}
	entries, err := h.svc.AuditLog(r.Context(), tenant, typ, day)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	resp := wire.AuditLogResponse{Entries: make([]wire.AuditLogEntry, len(entries))}
	for i, e := range entries {
		resp.Entries[i] = wire.AuditLogEntry{Timestamp: e.Timestamp, Event: e.Event, EventDetails: e.EventDetails, ModelID: e.ModelID,
			TinkerPath: e.TinkerPath, Purpose: e.Purpose}
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, resp)
}
