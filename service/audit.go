package service

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/telemetry"
)

// The audit log (GET /api/v1/audit, SDK 0.38's AdminClient.get_audit_log;
// docs/compatibility.md "Audit log"): a tenant's own API-key and checkpoint operations,
// one store record per entry (keyAudit + tenant + "/" + UTC day + "/" + time), written
// with a TTL of limits.audit_retention_seconds, so entries survive a restart and expire by
// themselves. A tenant sees only the entries of its own operations: reading another
// tenant's published checkpoint is recorded for the reader, never shown to the owner
// (that would tell the owner who the reader is).

const keyAudit = "audit/"

// Audit events. The SDK names them <resource>_<action>.
const (
	AuditAPIKeyRead               = "apikey_read"
	AuditAPIKeyDelete             = "apikey_delete"
	AuditCheckpointSave           = "checkpoint_save"
	AuditCheckpointSaveForSampler = "checkpoint_save_for_sampler"
	AuditCheckpointSaveExternal   = "checkpoint_save_external"
	AuditCheckpointPublish        = "checkpoint_publish"
	AuditCheckpointUnpublish      = "checkpoint_unpublish"
	AuditCheckpointSetTTL         = "checkpoint_set_ttl"
	AuditCheckpointDelete         = "checkpoint_delete"
	AuditCheckpointDownloadLink   = "checkpoint_download_link"
	AuditCheckpointCopy           = "checkpoint_copy"
	// AuditCheckpointRead: the tenant loaded another tenant's published checkpoint.
	AuditCheckpointRead = "checkpoint_read"
)

// AuditEntry is one entry, in the SDK's AuditLogEntry shape.
type AuditEntry struct {
	Timestamp    time.Time      `json:"timestamp"`
	Event        string         `json:"event"`
	EventDetails map[string]any `json:"event_details"`
	// ModelID, TinkerPath and Purpose repeat event_details' fields on checkpoint events
	// (the SDK's deprecated top-level fields).
	ModelID    *string `json:"model_id,omitempty"`
	TinkerPath *string `json:"tinker_path,omitempty"`
	Purpose    *string `json:"purpose,omitempty"`
}

// auditLog writes the tenants' audit entries (keyAudit, each kept for
// limits.audit_retention_seconds) and counts each tenant's entries of a UTC day
// (limits.max_audit_events_per_tenant_per_day). A (tenant, day) not yet counted since the
// start is counted from the store first.
type auditLog struct {
	st          store.Store
	log         *slog.Logger
	now         func() time.Time
	limits      config.Limits
	events      metric.Int64Counter // tuft.audit.events
	writeFailed func(ctx context.Context, reason string, err error, args ...any)

	mu sync.Mutex
	n  map[string]int // tenant + "/" + day → entries
	// warned: the (tenant, day)s whose over-limit entries were logged (once each).
	warned map[string]bool
}

func newAuditLog(st store.Store, log *slog.Logger, now func() time.Time, limits config.Limits, events metric.Int64Counter,
	writeFailed func(ctx context.Context, reason string, err error, args ...any)) auditLog {
	return auditLog{st: st, log: log, now: now, limits: limits, events: events, writeFailed: writeFailed,
		n: map[string]int{}, warned: map[string]bool{}}
}

func auditPrefix(tenant, day string) string {
	return keyAudit + url.PathEscape(tenant) + "/" + day + "/"
}

// add records one entry of tenant's. The operation it describes has happened: a
// failure to record is logged and counted (tuft.audit.events status write_failed), never
// returned.
func (a *auditLog) add(ctx context.Context, tenant, event string, details map[string]any) {
	ctx = context.WithoutCancel(ctx)
	now := a.now().UTC()
	day := now.Format(time.DateOnly)
	e := AuditEntry{Timestamp: now, Event: event, EventDetails: details}
	if e.EventDetails == nil {
		e.EventDetails = map[string]any{}
	}
	e.EventDetails["actor"] = tenant
	if strings.HasPrefix(event, "checkpoint_") {
		str := func(k string) *string {
			if v, ok := e.EventDetails[k].(string); ok && v != "" {
				return &v
			}
			return nil
		}
		e.ModelID, e.TinkerPath, e.Purpose = str("model_id"), str("tinker_path"), str("purpose")
	}
	status := telemetry.AuditKept
	defer func() {
		a.events.Add(ctx, 1, telemetry.AddAttrs(telemetry.MAttrEvent, event, telemetry.MAttrStatus, status)...)
	}()
	if !a.slot(ctx, tenant, day) {
		status = telemetry.AuditOverDayLimit
		return
	}
	b, err := json.Marshal(e)
	if err == nil {
		key := fmt.Sprintf("%s%020d-%s", auditPrefix(tenant, day), now.UnixNano(), newID(""))
		err = a.st.Set(ctx, key, b, a.limits.AuditRetentionSeconds.Duration())
	}
	if err != nil {
		status = telemetry.AuditWriteFailed
		a.writeFailed(ctx, reasonAudit, err, "tenant", tenant, "event", event)
	}
}

// slot takes one of tenant's entries of day, reporting false at the limit (logged once
// per tenant and day).
func (a *auditLog) slot(ctx context.Context, tenant, day string) bool {
	k := tenant + "/" + day
	a.mu.Lock()
	n, counted := a.n[k]
	a.mu.Unlock()
	if !counted {
		// Entries of this day written before a restart count too.
		_ = a.st.Scan(ctx, auditPrefix(tenant, day), func(string, []byte) error { n++; return nil })
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if cur, ok := a.n[k]; ok {
		n = cur // counted meanwhile by another entry
	}
	for old := range a.n { // only today's (and a late yesterday's) counts are needed
		if _, d, _ := strings.Cut(old, "/"); d < day && old != k {
			if t, err := time.Parse(time.DateOnly, d); err == nil && a.now().UTC().Sub(t) > 48*time.Hour {
				delete(a.n, old)
				delete(a.warned, old)
			}
		}
	}
	if n >= a.limits.MaxAuditEventsPerTenantPerDay {
		a.n[k] = n
		if !a.warned[k] {
			a.warned[k] = true
			a.log.WarnContext(ctx, "audit log full for the day: further entries are not kept", "tenant", tenant, "day", day,
				"limit", "limits.max_audit_events_per_tenant_per_day")
		}
		return false
	}
	a.n[k] = n + 1
	return true
}

// auditCheckpoint records a checkpoint event with the checkpoint's identity.
func (s *Service) auditCheckpoint(ctx context.Context, tenant, event string, c *Checkpoint, extra map[string]any) {
	d := map[string]any{"model_id": c.RunID, "tinker_path": c.TinkerPath(), "checkpoint_type": c.Type}
	if c.Tenant != tenant {
		d["owner"] = c.Tenant
	}
	for k, v := range extra {
		d[k] = v
	}
	s.audits.add(ctx, tenant, event, d)
}

// AuditAPIKey records an operation on the API key a request authenticated with, by the
// key's id (never the key or its hash).
func (s *Service) AuditAPIKey(ctx context.Context, tenant, event string, keyID int64, outcome string) {
	s.audits.add(ctx, tenant, event, map[string]any{"api_key_id": keyID, "outcome": outcome})
}

// Audit log filters (the SDK's event_type).
const (
	AuditAll           = "all"
	AuditCheckpoints   = "checkpoints"
	AuditProjects      = "projects"
	AuditTeams         = "teams"
	AuditOrganizations = "organizations"
)

// AuditLog returns tenant's entries of one UTC day (zero: today), oldest first, of eventType: all,
// checkpoints, or projects, teams and organizations (which this server has no operations
// on: always none).
func (s *Service) AuditLog(ctx context.Context, tenant, eventType string, day time.Time) ([]AuditEntry, error) {
	out := []AuditEntry{}
	switch eventType {
	case AuditAll, AuditCheckpoints:
	case AuditProjects, AuditTeams, AuditOrganizations:
		return out, nil
	default:
		return nil, invalidf("event_type %q must be one of all, checkpoints, projects, teams, organizations", eventType)
	}
	if day.IsZero() {
		day = s.now()
	}
	err := s.st.Scan(ctx, auditPrefix(tenant, day.UTC().Format(time.DateOnly)), func(key string, v []byte) error {
		var e AuditEntry
		if err := json.Unmarshal(v, &e); err != nil {
			s.log.WarnContext(ctx, "skipping an unreadable audit entry", "key", key, "error", err)
			return nil
		}
		if eventType == AuditCheckpoints && !strings.HasPrefix(e.Event, "checkpoint_") {
			return nil
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, classify(err)
	}
	// The Redis store scans in no order.
	sort.SliceStable(out, func(i, j int) bool { return out[i].Timestamp.Before(out[j].Timestamp) })
	return out, nil
}
