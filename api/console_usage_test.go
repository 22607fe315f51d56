package api_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
)

type usageReply struct {
	Days []struct {
		Day             string `json:"day"`
		TokensTrained   int64  `json:"tokens_trained"`
		TokensSampled   int64  `json:"tokens_sampled"`
		TokensPrefilled int64  `json:"tokens_prefilled"`
	} `json:"days"`
	AdapterMemoryBytes int64 `json:"adapter_memory_bytes"`
	DiskBytes          int64 `json:"disk_bytes"`
	Quotas             []struct {
		Key   string `json:"key"`
		Used  int64  `json:"used"`
		Limit int64  `json:"limit"`
		Unit  string `json:"unit"`
	} `json:"quotas"`
}

type billingReply struct {
	Data []struct {
		BucketStart      time.Time `json:"bucket_start"`
		BucketEnd        time.Time `json:"bucket_end"`
		BaseModel        string    `json:"base_model"`
		UserID           string    `json:"user_id"`
		SessionID        *string   `json:"session_id"`
		EstimatedCostUSD *float64  `json:"estimated_cost_usd"`
		Rate             *float64  `json:"effective_rate_usd_per_million_tokens"`
		RateGBMonth      *float64  `json:"effective_rate_usd_per_gigabyte_month"`
		EventInfo        struct {
			Type          string  `json:"type"`
			Cached        *bool   `json:"cached"`
			TokenCount    int64   `json:"token_count"`
			GigabyteHours float64 `json:"gigabyte_hours"`
		} `json:"event_info"`
	} `json:"data"`
	Sessions map[string]struct {
		UserMetadata map[string]string `json:"user_metadata"`
	} `json:"sessions"`
}

// usageWork trains one forward_backward of 2×16 tokens and samples 2 continuations of
// a 5-token prompt; it returns the session and the tokens sampled.
func usageWork(t *testing.T, h *harness, c *testenv.Client) (sess string, sampled int) {
	t.Helper()
	sess = h.session(c)
	model := h.model(c, sess, 0, 4)
	var f future
	c.Post("/api/v1/forward_backward", fwdbwdJSON(model, 1, datum(1, 16), datum(40, 16)), &f)
	c.Result(f.RequestID, nil)
	sm := h.sampler(c, sess, 1)
	var sf sampleFuture
	c.Post("/api/v1/asample", map[string]any{"sampling_session_id": sm, "seq_id": 0, "num_samples": 2, "prompt": prompt(11, 12, 13, 14, 15),
		"sampling_params": map[string]any{"max_tokens": 4, "temperature": 1, "seed": 3}}, &sf)
	var out sampleJSON
	c.Result(sf.RequestID, &out)
	for _, s := range out.Sequences {
		sampled += len(s.Tokens)
	}
	return sess, sampled
}

func billing(t *testing.T, c *testenv.Client, from, to time.Time) billingReply {
	t.Helper()
	q := url.Values{"starting_on": {from.Format(time.RFC3339)}, "ending_before": {to.Format(time.RFC3339)}}
	r := c.Do("GET", "/api/v1/billing/usage/events?"+q.Encode(), nil, nil)
	if r.Status != 200 {
		t.Fatalf("billing events: %d %s", r.Status, r.Body)
	}
	var b billingReply
	r.JSON(t, &b)
	return b
}

// D4 and D6: the tokens a tenant trained, prefilled and sampled, per day and per hourly
// bucket, priced by the billing keys, with every per-tenant quota; another tenant's
// usage is not in them; bad windows are 400s naming the problem.
func TestUsageAndBillingEvents(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Billing.USDPerMillionTrainingTokens = 2
	cfg.Billing.USDPerMillionSampleTokens = 10
	s := testenv.Start(t, cfg)
	h := &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	sess, sampled := usageWork(t, h, h.a)
	h.session(h.b) // bob holds a session, and used no tokens

	var u usageReply
	r := h.a.Do("GET", "/api/v1/usage?days=3", nil, nil)
	r.JSON(t, &u)
	today := u.Days[len(u.Days)-1]
	if r.Status != 200 || len(u.Days) != 3 || today.Day != time.Now().UTC().Format(time.DateOnly) ||
		today.TokensTrained != 32 || today.TokensSampled != int64(sampled) || today.TokensPrefilled != 5 || u.AdapterMemoryBytes <= 0 {
		t.Fatalf("usage: %d %s", r.Status, r.Body)
	}
	quotas := map[string][2]int64{}
	for _, q := range u.Quotas {
		quotas[q.Key] = [2]int64{q.Used, q.Limit}
		if q.Unit == "" {
			t.Fatalf("quota %s has no unit", q.Key)
		}
	}
	for key, want := range map[string][2]int64{
		"limits.max_runs_per_tenant":                 {1, int64(cfg.Limits.MaxRunsPerTenant)},
		"limits.max_sessions_per_tenant":             {1, int64(cfg.Limits.MaxSessionsPerTenant)},
		"limits.max_samplers_per_tenant":             {1, int64(cfg.Limits.MaxSamplersPerTenant)},
		"limits.max_adapter_bytes_per_tenant":        {u.AdapterMemoryBytes, cfg.Limits.MaxAdapterBytesPerTenant},
		"limits.max_disk_bytes_per_tenant":           {u.DiskBytes, cfg.Limits.MaxDiskBytesPerTenant},
		"limits.max_queued_per_tenant":               {0, int64(cfg.Limits.MaxQueuedPerTenant)},
		"limits.max_concurrent_requests_per_tenant":  {1, int64(cfg.Limits.MaxConcurrentRequestsPerTenant)}, // this request
		"limits.max_metric_streams_per_tenant":       {0, int64(cfg.Limits.MaxMetricStreamsPerTenant)},
		"limits.max_exports_per_tenant":              {0, int64(cfg.Limits.MaxExportsPerTenant)},
		"limits.max_body_bytes_in_flight_per_tenant": {0, cfg.Limits.MaxBodyBytesInFlightPerTenant},
	} {
		if got, ok := quotas[key]; !ok || got != want {
			t.Errorf("quota %s: %v (listed %v), want %v", key, got, ok, want)
		}
	}
	if _, ok := quotas["limits.max_metadata_bytes_per_tenant"]; !ok {
		t.Error("no limits.max_metadata_bytes_per_tenant quota")
	}
	var month usageReply
	h.a.Do("GET", "/api/v1/usage", nil, nil).JSON(t, &month)
	if len(month.Days) != 30 || month.Days[29].TokensTrained != 32 {
		t.Fatalf("usage without days: %d days", len(month.Days))
	}
	var ub usageReply
	h.b.Do("GET", "/api/v1/usage?days=1", nil, nil).JSON(t, &ub)
	if d := ub.Days[0]; d.TokensTrained != 0 || d.TokensSampled != 0 || d.TokensPrefilled != 0 || ub.AdapterMemoryBytes != 0 {
		t.Fatalf("bob sees alice's usage: %+v", ub)
	}

	hour := time.Now().UTC().Truncate(time.Hour)
	from, to := hour.Add(-time.Hour), hour.Add(2*time.Hour)
	b := billing(t, h.a, from, to)
	tokens := map[string]int64{}
	for _, e := range b.Data {
		if e.EventInfo.Type == "storage" { // sampled by the reaper (TestStorageBillingEvents)
			continue
		}
		if e.SessionID == nil || *e.SessionID != sess || e.BaseModel != testenv.Model || e.UserID != "alice" || e.BucketEnd.Sub(e.BucketStart) != time.Hour ||
			e.EstimatedCostUSD == nil || e.Rate == nil {
			t.Fatalf("event %+v", e)
		}
		kind := e.EventInfo.Type
		if e.EventInfo.Cached != nil && *e.EventInfo.Cached {
			kind += ":cached"
		}
		tokens[kind] += e.EventInfo.TokenCount
		want := map[string]float64{"training": 2, "sampling_sample": 10}[e.EventInfo.Type]
		if *e.Rate != want || *e.EstimatedCostUSD != want*float64(e.EventInfo.TokenCount)/1e6 {
			t.Fatalf("price of %+v: rate %v cost %v", e.EventInfo, *e.Rate, *e.EstimatedCostUSD)
		}
	}
	if tokens["training"] != 32 || tokens["sampling_sample"] != int64(sampled) || tokens["sampling_prefill"]+tokens["sampling_prefill:cached"] != 5 {
		t.Fatalf("billed tokens %v (sampled %d)", tokens, sampled)
	}
	if _, ok := b.Sessions[sess]; !ok || len(b.Sessions) != 1 {
		t.Fatalf("sessions %v", b.Sessions)
	}
	if bb := billing(t, h.b, from, to); len(bb.Sessions) != 0 || slicesAny(bb, func(typ string) bool { return typ != "storage" }) {
		t.Fatalf("bob's billing shows %+v", bb)
	}
	if early := billing(t, h.a, from.Add(-24*time.Hour), from); len(early.Data) != 0 {
		t.Fatalf("a window before the usage: %+v", early)
	}

	for q, want := range map[string]string{
		"": "starting_on is required",
		"starting_on=" + url.QueryEscape(from.Format(time.RFC3339)): "ending_before is required",
		"starting_on=yesterday&ending_before=today":                 "not an RFC 3339 time",
		"starting_on=" + url.QueryEscape(from.Add(time.Minute).Format(time.RFC3339)) + "&ending_before=" + url.QueryEscape(to.Format(time.RFC3339)):                    "aligned to a UTC hour",
		"starting_on=" + url.QueryEscape(to.Format(time.RFC3339)) + "&ending_before=" + url.QueryEscape(from.Format(time.RFC3339)):                                     "must be after starting_on",
		"starting_on=" + url.QueryEscape(from.Add(-15*24*time.Hour).Format(time.RFC3339)) + "&ending_before=" + url.QueryEscape(from.Format(time.RFC3339)):             "longer than 14 days",
		"starting_on=" + url.QueryEscape(hour.Add(3*time.Hour).Format(time.RFC3339)) + "&ending_before=" + url.QueryEscape(hour.Add(4*time.Hour).Format(time.RFC3339)): "in the future",
	} {
		r := h.a.Do("GET", "/api/v1/billing/usage/events?"+q, nil, nil)
		if r.Status != 400 || !strings.Contains(string(r.Body), want) {
			t.Errorf("%q: %d %s, want 400 with %q", q, r.Status, r.Body, want)
		}
	}
	for _, q := range []string{"days=0", "days=91", "days=x"} {
		if r := h.a.Do("GET", "/api/v1/usage?"+q, nil, nil); r.Status != 400 || !strings.Contains(string(r.Body), "days") {
			t.Errorf("usage?%s: %d %s", q, r.Status, r.Body)
		}
	}
}

// Usage buckets survive a restart on the embedded store.
func TestUsageSurvivesRestart(t *testing.T) {
	t.Parallel()
	cfg := testenv.Config(t, t.TempDir(), "embedded")
	s, err := server.Start(context.Background(), cfg, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := testenv.NewClient(t, s.URL(), testenv.KeyA)
	h := &harness{t: t, a: c}
	_, sampled := usageWork(t, h, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s = testenv.Start(t, cfg)
	var u usageReply
	testenv.NewClient(t, s.URL(), testenv.KeyA).Do("GET", "/api/v1/usage?days=1", nil, nil).JSON(t, &u)
	if d := u.Days[0]; d.TokensTrained != 32 || d.TokensSampled != int64(sampled) || d.TokensPrefilled != 5 {
		t.Fatalf("usage after restart: %+v", u.Days)
	}
}

// D5: the operator key reads every tenant's usage, queue depth and health, and nothing
// else; a tenant key is refused there (403), and without an operator key configured no
// key opens it.
func TestAdminOverviewNeedsTheOperatorKey(t *testing.T) {
	t.Parallel()
	const opKey = "tml-operator-0123456789abcdef"
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Auth.OperatorKeySHA256 = testenv.HashKey(opKey)
	cfg.Limits.MaxRunsPerTenant = 1
	s := testenv.Start(t, cfg)
	h := &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	_, sampled := usageWork(t, h, h.a)
	op := testenv.NewClient(t, s.URL(), opKey)

	var ov struct {
		Tenants []struct {
			Tenant           string     `json:"tenant"`
			Health           string     `json:"health"`
			Problems         []string   `json:"problems"`
			QueuedOperations int        `json:"queued_operations"`
			RunsReady        int        `json:"runs_ready"`
			SessionsOpen     int        `json:"sessions_open"`
			Usage            usageReply `json:"usage"`
		} `json:"tenants"`
		Server struct {
			Status          string         `json:"status"`
			SamplingBacklog map[string]int `json:"sampling_backlog"`
		} `json:"server"`
	}
	r := op.Do("GET", "/api/v1/admin/overview", nil, nil)
	r.JSON(t, &ov)
	if r.Status != 200 || len(ov.Tenants) != 2 || ov.Server.Status != "ok" {
		t.Fatalf("overview: %d %s", r.Status, r.Body)
	}
	if _, ok := ov.Server.SamplingBacklog[testenv.Model]; !ok {
		t.Fatalf("no backlog of %s: %s", testenv.Model, r.Body)
	}
	alice, bob := ov.Tenants[0], ov.Tenants[1]
	if alice.Tenant != "alice" || alice.RunsReady != 1 || alice.SessionsOpen != 1 || alice.Usage.Days[0].TokensTrained != 32 ||
		alice.Usage.Days[0].TokensSampled != int64(sampled) || alice.Health != "degraded" || len(alice.Problems) != 1 ||
		!strings.Contains(alice.Problems[0], "limits.max_runs_per_tenant") {
		t.Fatalf("alice: %+v", alice)
	}
	if bob.Tenant != "bob" || bob.Health != "ok" || bob.Usage.Days[0].TokensTrained != 0 {
		t.Fatalf("bob: %+v", bob)
	}

	for _, c := range []struct {
		who    string
		c      *testenv.Client
		method string
		path   string
		status int
		want   string
	}{
		{"alice", h.a, "GET", "/api/v1/admin/overview", 403, "operator key"},
		{"bob", h.b, "GET", "/api/v1/admin/overview", 403, "operator key"},
		{"no key", testenv.NewClient(t, s.URL(), ""), "GET", "/api/v1/admin/overview", 401, "missing API key"},
		{"a wrong key", testenv.NewClient(t, s.URL(), "tml-wrong"), "GET", "/api/v1/admin/overview", 401, "invalid API key"},
		{"the operator", op, "GET", "/api/v1/training_runs", 403, "operator routes"},
		{"the operator", op, "GET", "/api/v1/usage", 403, "operator routes"},
		{"the operator", op, "POST", "/api/v1/create_session", 403, "operator routes"},
	} {
		if r := c.c.Do(c.method, c.path, nil, nil); r.Status != c.status || !strings.Contains(string(r.Body), c.want) {
			t.Errorf("%s on %s %s: %d %s, want %d with %q", c.who, c.method, c.path, r.Status, r.Body, c.status, c.want)
		}
	}

	// No operator configured: nobody reads the overview.
	s2 := testenv.Start(t, testenv.Config(t, t.TempDir(), "memory"))
	for key, want := range map[string]int{testenv.KeyA: 403, opKey: 401} {
		if r := testenv.NewClient(t, s2.URL(), key).Do("GET", "/api/v1/admin/overview", nil, nil); r.Status != want {
			t.Errorf("without an operator, key %s: %d %s, want %d", key[:8], r.Status, r.Body, want)
		}
	}
}

func slicesAny(b billingReply, f func(typ string) bool) bool {
	for _, e := range b.Data {
		if f(e.EventInfo.Type) {
			return true
		}
	}
	return false
}

// The first reaper pass of an hour samples each tenant's bytes on disk: a storage event
// of gigabyte_hours priced by billing.usd_per_gb_month_storage (per 720 hours); a pass
// later in the hour adds nothing, and another tenant's storage is not in it.
func TestStorageBillingEvents(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Billing.USDPerGBMonthStorage = 72
	s := testenv.Start(t, cfg)
	h := &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	model := h.model(h.a, h.session(h.a), 0, 4)
	var f future
	h.a.Post("/api/v1/save_weights", map[string]any{"model_id": model, "seq_id": 1, "path": "ckpt"}, &f)
	h.a.Result(f.RequestID, nil)
	var u usageReply
	h.a.Do("GET", "/api/v1/usage?days=1", nil, nil).JSON(t, &u)
	if u.DiskBytes <= 0 {
		t.Fatalf("disk after a save: %+v", u)
	}
	// The background reaper may have sampled the hour before the save: the next hour's
	// first pass is the one under test.
	next := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	s.Service.SampleStorageAt(next)
	s.Service.SampleStorageAt(next.Add(time.Minute))
	b := billing(t, h.a, next.Add(-time.Hour), next.Add(time.Hour))
	var storage []float64
	for _, e := range b.Data {
		if e.EventInfo.Type == "storage" && e.BucketStart.Equal(next) {
			storage = append(storage, e.EventInfo.GigabyteHours)
			if e.BaseModel != "" || e.SessionID != nil || e.RateGBMonth == nil || *e.RateGBMonth != 72 || *e.EstimatedCostUSD != 72*e.EventInfo.GigabyteHours/720 {
				t.Fatalf("storage event %+v", e)
			}
		}
	}
	if len(storage) != 1 || storage[0] != float64(u.DiskBytes)/1e9 {
		t.Fatalf("storage events %v, disk %d bytes", storage, u.DiskBytes)
	}
	if bb := billing(t, h.b, next.Add(-time.Hour), next.Add(time.Hour)); len(bb.Data) != 0 {
		t.Fatalf("bob's billing: %+v", bb)
	}
}
