package telemetry_test

import (
	"net/http"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/telemetry"
)

// A request a per-tenant quota refuses carries the quota's config key on its HTTP span
// (tuft.quota_limit); an accepted one carries none.
func TestQuotaRefusalNamesItsLimitOnTheSpan(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Limits.MaxSamplersPerTenant = 1
	s, rec, _ := observed(t, cfg)
	c := testenv.NewClient(t, s.URL(), testenv.KeyA)
	se := c.NewSession()
	for seq, want := range []int{http.StatusOK, http.StatusForbidden} {
		if r := c.Do("POST", "/api/v1/create_sampling_session", map[string]any{"session_id": se, "sampling_session_seq_id": seq,
			"base_model": testenv.Model}, nil); r.Status != want {
			t.Fatalf("sampler %d: %d %s", seq, r.Status, r.Body)
		}
	}
	var got []string
	for _, sp := range rec.Ended() {
		if sp.Name() == "POST /api/v1/create_sampling_session" {
			got = append(got, attrs(sp)[telemetry.AttrQuotaLimit])
		}
	}
	if len(got) != 2 || got[0] != "" || got[1] != "limits.max_samplers_per_tenant" {
		t.Fatalf("%s on the create_sampling_session spans: %q", telemetry.AttrQuotaLimit, got)
	}
}
