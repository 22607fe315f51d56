package api_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
	"github.com/tuft-go/tuft/server"
	"github.com/tuft-go/tuft/store/storetest"
)

type auditJSON struct {
	Entries []struct {
		Timestamp    time.Time      `json:"timestamp"`
		Event        string         `json:"event"`
		EventDetails map[string]any `json:"event_details"`
		ModelID      *string        `json:"model_id"`
		TinkerPath   *string        `json:"tinker_path"`
		Purpose      *string        `json:"purpose"`
	} `json:"entries"`
}

func (a auditJSON) events() []string {
	var out []string
	for _, e := range a.Entries {
		out = append(out, e.Event)
	}
	return out
}

func getAudit(t *testing.T, c *testenv.Client, query string) auditJSON {
	t.Helper()
	r := c.Do("GET", "/api/v1/audit"+query, nil, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("audit%s: %d %s", query, r.Status, r.Body)
	}
	var out auditJSON
	r.JSON(t, &out)
	return out
}

// The audit log holds a tenant's own key and checkpoint operations, in order, in the SDK's
// AuditLogEntry shape; a read of another tenant's published checkpoint is the reader's
// entry alone; filters by event_type and day; refuses a bad day or an unknown parameter;
// and survives a restart on the embedded store.
func TestAuditLogRecordsTheTenantsOwnOperations(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "embedded")
	start := func() (*server.Server, *harness) {
		s := testenv.Start(t, cfg)
		return s, &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	}
	s, h := start()
	if n := len(getAudit(t, h.a, "").Entries); n != 0 {
		t.Fatalf("a new tenant has %d entries", n)
	}
	sess := h.session(h.a)
	model := h.model(h.a, sess, 0, 4)
	var f future
	var saved struct{ Path string }
	h.a.Post("/api/v1/save_weights", map[string]any{"model_id": model, "path": "w1", "seq_id": 1}, &f)
	h.a.Result(f.RequestID, &saved)
	h.a.Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": model, "path": "s1", "seq_id": 2}, &f)
	var sampler struct{ Path string }
	h.a.Result(f.RequestID, &sampler)
	ck := "/api/v1/training_runs/" + model + "/checkpoints/sampler_weights/s1"
	for _, rq := range []struct {
		method, path string
		body         any
		status       int
	}{
		{"POST", ck + "/publish", nil, http.StatusNoContent},
		{"PUT", ck + "/ttl", map[string]any{"ttl_seconds": 3600}, http.StatusNoContent},
		{"GET", ck + "/archive", nil, http.StatusFound},
	} {
		r := h.a.Do(rq.method, rq.path, rq.body, map[string]string{"Accept": "application/json"})
		if r.Status/100 != rq.status/100 {
			t.Fatalf("%s %s: %d %s", rq.method, rq.path, r.Status, r.Body)
		}
	}
	// B reads A's published checkpoint: B's entry, not A's.
	bSess := h.session(h.b)
	h.b.Post("/api/v1/create_sampling_session", map[string]any{"session_id": bSess, "sampling_session_seq_id": 0, "model_path": sampler.Path}, nil)
	if r := h.a.Do("DELETE", ck+"/publish", nil, nil); r.Status/100 != 2 {
		t.Fatalf("unpublish: %d %s", r.Status, r.Body)
	}
	if r := h.a.Do("DELETE", "/api/v1/training_runs/"+model+"/checkpoints/weights/w1", nil, nil); r.Status/100 != 2 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	h.a.Do("GET", "/api/v1/auth/apikey/me", nil, nil)
	if r := h.a.Do("DELETE", "/api/v1/auth/apikey/me", nil, nil); r.Status != http.StatusForbidden {
		t.Fatalf("key delete: %d %s", r.Status, r.Body)
	}

	want := []string{"checkpoint_save", "checkpoint_save_for_sampler", "checkpoint_publish", "checkpoint_set_ttl",
		"checkpoint_download_link", "checkpoint_unpublish", "checkpoint_delete", "apikey_read", "apikey_delete"}
	a := getAudit(t, h.a, "")
	if !slices.Equal(a.events(), want) {
		t.Fatalf("A's events %v, want %v", a.events(), want)
	}
	for i, e := range a.Entries {
		if e.EventDetails["actor"] != "alice" || (i > 0 && e.Timestamp.Before(a.Entries[i-1].Timestamp)) {
			t.Fatalf("entry %d: %+v", i, e)
		}
		if strings.HasPrefix(e.Event, "checkpoint_") && (e.ModelID == nil || *e.ModelID != model || e.TinkerPath == nil ||
			e.EventDetails["tinker_path"] != *e.TinkerPath) {
			t.Fatalf("checkpoint entry %d lacks its checkpoint: %+v", i, e)
		}
	}
	if a.Entries[0].EventDetails["tinker_path"] != saved.Path || a.Entries[3].EventDetails["ttl_seconds"] != float64(3600) {
		t.Fatalf("details: %+v / %+v", a.Entries[0], a.Entries[3])
	}
	if b := getAudit(t, h.b, ""); len(b.Entries) != 1 || b.Entries[0].Event != "checkpoint_read" || b.Entries[0].Purpose == nil ||
		*b.Entries[0].Purpose != "create_sampling_session" || *b.Entries[0].TinkerPath != sampler.Path || b.Entries[0].EventDetails["owner"] != "alice" ||
		b.Entries[0].EventDetails["actor"] != "bob" {
		t.Fatalf("B's log: %+v", b)
	}

	// Filters.
	if got := getAudit(t, h.a, "?event_type=checkpoints").events(); !slices.Equal(got, want[:7]) {
		t.Fatalf("checkpoints: %v", got)
	}
	for _, typ := range []string{"projects", "teams", "organizations"} {
		if n := len(getAudit(t, h.a, "?event_type="+typ).Entries); n != 0 {
			t.Fatalf("%s: %d entries", typ, n)
		}
	}
	today := time.Now().UTC().Format(time.DateOnly)
	if n := len(getAudit(t, h.a, "?event_type=all&day="+today).Entries); n != len(want) {
		t.Fatalf("day=%s: %d entries", today, n)
	}
	if n := len(getAudit(t, h.a, "?day=2020-01-01").Entries); n != 0 {
		t.Fatalf("an old day has %d entries", n)
	}
	for q, name := range map[string]string{"?day=yesterday": "day", "?day=2026-13-01": "day", "?event_type=users": "event_type",
		"?limit=5": "limit"} {
		r := h.a.Do("GET", "/api/v1/audit"+q, nil, nil)
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), name) {
			t.Fatalf("audit%s: %d %s", q, r.Status, r.Body)
		}
	}

	// Restart.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_, h = start()
	if got := getAudit(t, h.a, "").events(); !slices.Equal(got, want) {
		t.Fatalf("after a restart: %v", got)
	}
}

// limits.max_audit_events_per_tenant_per_day: past it an operation still runs and its
// entry is not kept; the other tenant's entries are not affected.
func TestAuditLogDayLimit(t *testing.T) {
	t.Parallel()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Limits.MaxAuditEventsPerTenantPerDay = 2
	s, reader := startWithReader(t, cfg)
	a, b := testenv.NewClient(t, s.URL(), testenv.KeyA), testenv.NewClient(t, s.URL(), testenv.KeyB)
	for range 3 {
		if r := a.Do("GET", "/api/v1/auth/apikey/me", nil, nil); r.Status != http.StatusOK {
			t.Fatalf("apikey: %d", r.Status)
		}
	}
	b.Do("GET", "/api/v1/auth/apikey/me", nil, nil)
	if n := len(getAudit(t, a, "").Entries); n != 2 {
		t.Fatalf("A kept %d entries, limit 2", n)
	}
	if n := len(getAudit(t, b, "").Entries); n != 1 {
		t.Fatalf("B kept %d entries", n)
	}
	if got := counterByAttr(t, reader, "tuft.audit.events", "status"); got["kept"] != 3 || got["over_day_limit"] != 1 || len(got) != 2 {
		t.Fatalf("tuft.audit.events by status: %v", got)
	}
	if got := counterByAttr(t, reader, "tuft.audit.events", "event"); got["apikey_read"] != 4 || len(got) != 1 {
		t.Fatalf("tuft.audit.events by event: %v", got)
	}
}

// On Redis (which scans in no order) the span record and the audit log keep their order,
// and a second API replica on the same store reads both.
func TestSessionSpansAndAuditOnRedis(t *testing.T) {
	redisURL := storetest.StartRedis(t)
	ns := fmt.Sprintf("trace%d", time.Now().UnixNano())
	var clients []*testenv.Client
	for _, id := range []string{"api-a", "api-b"} {
		cfg := spanConfig(t, "memory")
		cfg.Persistence.Mode, cfg.Persistence.RedisURL, cfg.Persistence.Namespace = "redis", redisURL, ns
		cfg.Server.ReplicaID = id
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		s := testenv.Start(t, cfg)
		clients = append(clients, testenv.NewClient(t, s.URL(), testenv.KeyA))
	}
	a, other := clients[0], clients[1]
	sess := a.NewSession()
	trainOnce(a, sess)
	var got spansJSON
	check.Eventually(t, 10*time.Second, "spans", func() bool {
		got = getSpans(t, a, sess)
		return trained(got.Spans)
	})
	for i := 1; i < len(got.Spans); i++ {
		if got.Spans[i].Seq <= got.Spans[i-1].Seq {
			t.Fatalf("spans out of order: %d after %d", got.Spans[i].Seq, got.Spans[i-1].Seq)
		}
	}
	if o := getSpans(t, other, sess); len(o.Spans) < len(got.Spans) {
		t.Fatalf("the other replica reads %d spans, the owner %d", len(o.Spans), len(got.Spans))
	}
	for range 5 {
		a.Do("GET", "/api/v1/auth/apikey/me", nil, nil)
		other.Do("GET", "/api/v1/auth/apikey/me", nil, nil)
	}
	log := getAudit(t, other, "")
	if len(log.Entries) != 10 {
		t.Fatalf("%d entries, want 10", len(log.Entries))
	}
	for i := 1; i < len(log.Entries); i++ {
		if log.Entries[i].Timestamp.Before(log.Entries[i-1].Timestamp) {
			t.Fatalf("audit entries out of order at %d", i)
		}
	}
}
