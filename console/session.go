package console

import (
	"fmt"
	"net/http"
	"net/url"
	"time"
)

type sessionData struct {
	ID      string
	Session struct {
		TrainingRunIDs []string          `json:"training_run_ids"`
		SamplerIDs     []string          `json:"sampler_ids"`
		UserMetadata   map[string]string `json:"user_metadata"`
		DisplayName    *string           `json:"display_name"`
		Status         struct {
			Type string `json:"type"`
		} `json:"status"`
	}
}

func (c *Console) sessionPage(w http.ResponseWriter, r *http.Request, se *session) {
	d := sessionData{ID: r.PathValue("session_id")}
	if !c.load(w, r, se, "/api/v1/sessions/"+url.PathEscape(d.ID), &d.Session) {
		return
	}
	c.render(w, r, http.StatusOK, "session", c.pageOf(se, "Session "+d.ID, "", "session.js", d))
}

// traceWait is how long the trace download waits for the export to be ready, polling
// every tracePoll. Not config keys: they pace one user's click, and the export's own
// bound is the trace service's.
const (
	traceWait = 60 * time.Second
	tracePoll = 500 * time.Millisecond
)

// traceDownload asks for the session's trace export and, once it is ready, sends the
// browser to its signed link.
func (c *Console) traceDownload(w http.ResponseWriter, r *http.Request, se *session) {
	target := "/api/v1/sessions/" + url.PathEscape(r.PathValue("session_id")) + "/trace_export"
	deadline := time.NewTimer(traceWait)
	defer deadline.Stop()
	for {
		var out struct {
			Status string `json:"status"`
			URL    string `json:"url"`
			Error  any    `json:"error"`
		}
		p, err := c.getJSON(r, se, target, &out)
		if err != nil || p.Status != http.StatusOK {
			c.failed(w, r, se, p, err)
			return
		}
		switch out.Status {
		case "ready":
			if u, err := url.Parse(out.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
				c.errorPage(w, r, se, http.StatusBadGateway, "the trace export's link is not an http(s) URL")
				return
			}
			http.Redirect(w, r, out.URL, http.StatusSeeOther)
			return
		case "failed":
			c.errorPage(w, r, se, http.StatusBadGateway, fmt.Sprint("the trace export failed: ", out.Error))
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-deadline.C:
			c.errorPage(w, r, se, http.StatusGatewayTimeout, "the trace export is not ready yet; try again")
			return
		case <-time.After(tracePoll):
		}
	}
}
