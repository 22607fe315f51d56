package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
)

const operatorKey = "tml-test-operator-key-0123456789"

// The operator key signs in like any key, lands on the overview of every tenant, and
// opens nothing else; a tenant's key gets a 403 page there and no Operator link.
func TestOperatorOverview(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *config.Config) { c.Auth.OperatorKeySHA256 = testenv.HashKey(operatorKey) })
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	bc := testenv.NewClient(t, s.URL(), testenv.KeyB)
	trainRun(t, a, "a")
	trainRun(t, bc, "b")

	op := newBrowser(t, s.URL())
	r := op.signInStatus(operatorKey)
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/console/admin" {
		t.Fatalf("operator sign-in: %d %q %s", r.StatusCode, r.Header.Get("Location"), r.body)
	}
	page := op.get("/console/admin")
	if page.StatusCode != 200 {
		t.Fatalf("overview: %d %s", page.StatusCode, page.body)
	}
	for _, want := range []string{`table id="tenants"`, `data-tenant="alice"`, `data-tenant="bob"`, `class="tenant-health health-ok">ok`,
		`href="/console/admin" class="active"`, `data-quota="limits.max_runs_per_tenant"`, `<span class="tenant">operator</span>`} {
		if !strings.Contains(page.body, want) {
			t.Errorf("overview lacks %s", want)
		}
	}
	if r := op.get("/console/runs"); r.StatusCode != http.StatusForbidden || !strings.Contains(r.body, "operator key") {
		t.Errorf("the operator's runs page: %d %s", r.StatusCode, r.body)
	}
	if r := op.get("/console/login"); r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/console/admin" {
		t.Errorf("the operator's login page: %d %q", r.StatusCode, r.Header.Get("Location"))
	}

	alice := newBrowser(t, s.URL())
	alice.signIn(testenv.KeyA)
	if r := alice.get("/console/admin"); r.StatusCode != http.StatusForbidden {
		t.Errorf("alice's overview: %d", r.StatusCode)
	}
	if r := alice.get("/console/api/api/v1/admin/overview"); r.StatusCode != http.StatusForbidden {
		t.Errorf("alice's overview through the forwarder: %d", r.StatusCode)
	}
	if r := alice.get("/console/runs"); strings.Contains(r.body, `href="/console/admin"`) {
		t.Errorf("a tenant's nav links the operator page")
	}
}
