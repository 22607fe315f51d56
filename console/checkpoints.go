package console

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
)

// ckptView is a checkpoint as the API answers it.
type ckptView struct {
	ID         string     `json:"checkpoint_id"`
	Type       string     `json:"checkpoint_type"`
	Time       time.Time  `json:"time"`
	TinkerPath string     `json:"tinker_path"`
	SizeBytes  *int64     `json:"size_bytes"`
	Public     bool       `json:"public"`
	ExpiresAt  *time.Time `json:"expires_at"`
}

// RunID is the training run of the checkpoint's tinker path (tinker://<run>/<id>).
func (v ckptView) RunID() string {
	rest, _ := strings.CutPrefix(v.TinkerPath, "tinker://")
	run, _, _ := strings.Cut(rest, "/")
	return run
}

// ArchiveURL downloads the checkpoint's archive through the forwarder (the API answers
// a redirect to a signed link).
func (v ckptView) ArchiveURL() string {
	return Prefix + "/api/api/v1/training_runs/" + url.PathEscape(v.RunID()) + "/checkpoints/" + escapeSegments(v.ID) + "/archive"
}

// escapeSegments escapes each /-separated segment of p.
func escapeSegments(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

type checkpointsData struct {
	Checkpoints []ckptView
	Total       int
}

func (c *Console) checkpointsPage(w http.ResponseWriter, r *http.Request, se *session) {
	var out struct {
		Checkpoints []ckptView `json:"checkpoints"`
		Cursor      cursor     `json:"cursor"`
	}
	if !c.load(w, r, se, fmt.Sprintf("/api/v1/checkpoints?limit=%d", maxListed), &out) {
		return
	}
	c.render(w, r, http.StatusOK, "checkpoints", c.pageOf(se, "Checkpoints", "checkpoints", "checkpoints.js",
		checkpointsData{Checkpoints: out.Checkpoints, Total: out.Cursor.Total}))
}

// checkpointAction runs a checkpoint form of the checkpoints page (signedIn checked its
// CSRF token): publish, unpublish, delete or ttl, through the API's checkpoint routes.
func (c *Console) checkpointAction(w http.ResponseWriter, r *http.Request, se *session) {
	run, id, action := r.PostFormValue("run"), r.PostFormValue("id"), r.PostFormValue("action")
	base := "/api/v1/training_runs/" + url.PathEscape(run) + "/checkpoints/" + escapeSegments(id)
	if run == "" || id == "" || path.Clean(base) != base {
		c.errorPage(w, r, se, http.StatusBadRequest, "the form names no checkpoint (run and id)")
		return
	}
	method, target := "", ""
	var body any
	switch action {
	case "publish":
		method, target = http.MethodPost, base+"/publish"
	case "unpublish":
		method, target = http.MethodDelete, base+"/publish"
	case "delete":
		method, target = http.MethodDelete, base
	case "ttl":
		method, target = http.MethodPut, base+"/ttl"
		var ttl *int64
		if s := strings.TrimSpace(r.PostFormValue("ttl_seconds")); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				c.errorPage(w, r, se, http.StatusBadRequest, "ttl_seconds must be a whole number of seconds (empty: never expires)")
				return
			}
			ttl = &n
		}
		body = map[string]any{"ttl_seconds": ttl}
	default:
		c.errorPage(w, r, se, http.StatusBadRequest, "unknown checkpoint action "+strconv.Quote(action)+" (publish, unpublish, delete, ttl)")
		return
	}
	p, err := c.call(r.Context(), r, se.key, method, target, body)
	if err != nil || p.Status/100 != 2 {
		c.failed(w, r, se, p, err)
		return
	}
	http.Redirect(w, r, Prefix+"/checkpoints", http.StatusSeeOther)
}
