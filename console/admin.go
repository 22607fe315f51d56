package console

import (
	"net/http"
	"slices"

	"github.com/tuft-go/tuft/api/wire"
)

// adminRow is one tenant of the operator overview, with the figures the table shows.
type adminRow struct {
	wire.TenantOverview
	Today wire.UsageDay // the latest day the overview reports
}

// Quotas are the tenant's quotas as the usage page shows them.
func (a adminRow) Quotas() []quotaView {
	out := make([]quotaView, 0, len(a.Usage.Quotas))
	for _, q := range a.Usage.Quotas {
		out = append(out, quotaView{Key: q.Key, Used: q.Used, Limit: q.Limit, Unit: q.Unit})
	}
	return out
}

type adminData struct {
	Server  wire.ServerOverview
	Models  []string // the sampling backlog's models, sorted
	Tenants []adminRow
}

// adminPage is the operator overview (GET /api/v1/admin/overview): every tenant's usage,
// queues and health. The API opens it to the operator key only; any other key gets the
// API's 403 as a page.
func (c *Console) adminPage(w http.ResponseWriter, r *http.Request, se *session) {
	var ov wire.AdminOverviewResponse
	if !c.load(w, r, se, "/api/v1/admin/overview", &ov) {
		return
	}
	d := adminData{Server: ov.Server}
	for m := range ov.Server.SamplingBacklog {
		d.Models = append(d.Models, m)
	}
	slices.Sort(d.Models)
	for _, t := range ov.Tenants {
		row := adminRow{TenantOverview: t}
		if n := len(t.Usage.Days); n > 0 {
			row.Today = t.Usage.Days[n-1]
		}
		d.Tenants = append(d.Tenants, row)
	}
	c.render(w, r, http.StatusOK, "admin", c.pageOf(se, "Operator overview", "admin", "", d))
}
