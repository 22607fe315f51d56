package console

import (
	"bytes"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
)

// pageNames are the templates (templates/<name>.html), each rendered inside layout.html.
var pageNames = []string{"login", "error", "runs", "run", "checkpoints", "playground", "usage", "session", "admin"}

// page is what every template gets.
type page struct {
	Title    string
	Active   string // the nav entry to mark
	Tenant   string // "" before sign-in: no nav
	Operator bool
	CSRF     string
	Script   string // the page's script under /console/static/, beside console.js
	Data     any
}

func parseTemplates() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, n := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+n+".html")
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", n, err)
		}
		out[n] = t
	}
	return out, nil
}

var funcs = template.FuncMap{
	"time": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return ""
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		case *time.Time:
			if v == nil || v.IsZero() {
				return ""
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		}
		return ""
	},
	"bytes": formatBytes,
	"num": func(v any) string {
		switch x := v.(type) {
		case *float64:
			if x == nil {
				return ""
			}
			return formatFloat(*x)
		case float64:
			return formatFloat(x)
		case *int:
			if x == nil {
				return ""
			}
			return fmt.Sprint(*x)
		case int, int64:
			return fmt.Sprint(x)
		}
		return ""
	},
}

func formatFloat(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Sprint(f)
	}
	return fmt.Sprintf("%.4g", f)
}

func formatBytes(v any) string {
	var n float64
	switch x := v.(type) {
	case int64:
		n = float64(x)
	case *int64:
		if x == nil {
			return ""
		}
		n = float64(*x)
	case float64:
		n = x
	default:
		return ""
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", n)
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}

// render writes the named page; the reply is built whole first, so a template error is
// a 500, not half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, code int, name string, p page) {
	var buf bytes.Buffer
	if err := c.tmpl[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		c.log.ErrorContext(r.Context(), "console page failed", "page", name, "error", err)
		http.Error(w, "console page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

func (c *Console) pageOf(se *session, title, active, script string, data any) page {
	who := se.tenant
	if who == operatorLabel {
		who = "operator"
	}
	return page{Title: title, Active: active, Tenant: who, Operator: se.operator, CSRF: se.csrf, Script: script, Data: data}
}

type errorData struct {
	Code    int
	Status  string
	Message string
}

// errorPage answers code with a page that says msg (se may be nil: no nav).
func (c *Console) errorPage(w http.ResponseWriter, r *http.Request, se *session, code int, msg string) {
	p := page{Title: http.StatusText(code), Data: errorData{Code: code, Status: http.StatusText(code), Message: msg}}
	if se != nil {
		p = c.pageOf(se, http.StatusText(code), "", "", p.Data)
	}
	c.render(w, r, code, "error", p)
}

// failed answers a page whose API read failed: the API's status and message.
func (c *Console) failed(w http.ResponseWriter, r *http.Request, se *session, p reply, err error) {
	if err != nil {
		c.log.ErrorContext(r.Context(), "console read failed", "error", err)
		c.errorPage(w, r, se, http.StatusInternalServerError, err.Error())
		return
	}
	c.errorPage(w, r, se, p.Status, p.detail())
}

// runView is a training run as the API answers it (with the console fields of the run
// JSON: steps, last_loss, state, created_at, session_id).
type runView struct {
	ID              string            `json:"training_run_id"`
	BaseModel       string            `json:"base_model"`
	LoraRank        *int              `json:"lora_rank"`
	Corrupted       bool              `json:"corrupted"`
	LastRequestTime time.Time         `json:"last_request_time"`
	UserMetadata    map[string]string `json:"user_metadata"`
	Steps           *int              `json:"steps"`
	LastLoss        *float64          `json:"last_loss"`
	State           string            `json:"state"`
	CreatedAt       *time.Time        `json:"created_at"`
	SessionID       string            `json:"session_id"`
}

// Name is the run's user_metadata name, else its id.
func (v runView) Name() string {
	if n := v.UserMetadata["name"]; n != "" {
		return n
	}
	return v.ID
}

// StateText is the run's state as the API names it.
func (v runView) StateText() string {
	if v.State != "" {
		return v.State
	}
	if v.Corrupted {
		return "corrupted"
	}
	return ""
}

// maxListed is how many runs or checkpoints a page lists (the API's page bound for runs).
// Not a config key: the API bounds the page, this only picks the size.
const maxListed = 1000

type runsData struct {
	Runs  []runView
	Total int
	Query string
}

func (c *Console) runsPage(w http.ResponseWriter, r *http.Request, se *session) {
	var out struct {
		Runs   []runView `json:"training_runs"`
		Cursor cursor    `json:"cursor"`
	}
	if !c.load(w, r, se, fmt.Sprintf("/api/v1/training_runs?limit=%d", maxListed), &out) {
		return
	}
	c.render(w, r, http.StatusOK, "runs", c.pageOf(se, "Runs", "runs", "runs.js", runsData{Runs: out.Runs, Total: out.Cursor.Total, Query: r.URL.Query().Get("q")}))
}

type samplerView struct {
	ID        string `json:"sampler_id"`
	BaseModel string `json:"base_model"`
	ModelPath string `json:"model_path"`
}

type runData struct {
	Run         runView
	Checkpoints []ckptView
	Samplers    []samplerView
}

// maxSamplersRead bounds the sampler lookups of one run page: a session's samplers are
// read one by one to find the run's. Not a config key: limits.max_samplers_per_tenant
// bounds what there is; this bounds one page's work.
const maxSamplersRead = 256

func (c *Console) runPage(w http.ResponseWriter, r *http.Request, se *session) {
	id := r.PathValue("run_id")
	var d runData
	base := "/api/v1/training_runs/" + url.PathEscape(id)
	if !c.load(w, r, se, base, &d.Run) {
		return
	}
	var cks struct {
		Checkpoints []ckptView `json:"checkpoints"`
	}
	if !c.load(w, r, se, base+"/checkpoints", &cks) {
		return
	}
	d.Checkpoints = cks.Checkpoints
	if d.Run.SessionID != "" {
		var sess struct {
			SamplerIDs []string `json:"sampler_ids"`
		}
		if p, err := c.getJSON(r, se, "/api/v1/sessions/"+url.PathEscape(d.Run.SessionID), &sess); err == nil && p.Status == http.StatusOK {
			for i, sid := range sess.SamplerIDs {
				if i == maxSamplersRead {
					break
				}
				var sv samplerView
				if p, err := c.getJSON(r, se, "/api/v1/samplers/"+url.PathEscape(sid), &sv); err == nil && p.Status == http.StatusOK &&
					strings.HasPrefix(sv.ModelPath, "tinker://"+id+"/") {
					d.Samplers = append(d.Samplers, sv)
				}
			}
		}
	}
	c.render(w, r, http.StatusOK, "run", c.pageOf(se, "Run "+d.Run.Name(), "runs", "run.js", d))
}

type modelView struct {
	ID   string `json:"id"`
	Root string `json:"root"`
}

// Base reports whether the model is a base model (the OpenAI list gives a base model no
// root, or itself as its root).
func (m modelView) Base() bool { return m.Root == "" || m.Root == m.ID }

type playgroundData struct {
	Models   []modelView
	Selected string
}

func (c *Console) playgroundPage(w http.ResponseWriter, r *http.Request, se *session) {
	var out struct {
		Data []modelView `json:"data"`
	}
	if !c.load(w, r, se, "/oai/api/v1/models", &out) {
		return
	}
	// Base models first, then checkpoints.
	sort.SliceStable(out.Data, func(i, j int) bool { return out.Data[i].Base() && !out.Data[j].Base() })
	c.render(w, r, http.StatusOK, "playground", c.pageOf(se, "Playground", "playground", "playground.js",
		playgroundData{Models: out.Data, Selected: r.URL.Query().Get("model")}))
}

type quotaView struct {
	Key   string `json:"key"`
	Used  int64  `json:"used"`
	Limit int64  `json:"limit"`
	Unit  string `json:"unit"`
}

// Percent is how much of the quota is used, 0..100.
func (q quotaView) Percent() string {
	if q.Limit <= 0 {
		return ""
	}
	pc := 100 * float64(q.Used) / float64(q.Limit)
	if pc > 0 && pc < 10 {
		return fmt.Sprintf("%.1f%%", pc)
	}
	return fmt.Sprintf("%.0f%%", pc)
}

// High is where the quota's meter turns to a warning: 80% of the limit.
func (q quotaView) High() int64 { return q.Limit * 8 / 10 }

// Show is an amount of the quota's unit, bytes in binary units.
func (q quotaView) Show(n int64) string {
	if q.Unit == "bytes" {
		return formatBytes(n)
	}
	return fmt.Sprintf("%d %s", n, q.Unit)
}

type usageData struct {
	Days []struct {
		Day             string `json:"day"`
		TokensTrained   int64  `json:"tokens_trained"`
		TokensSampled   int64  `json:"tokens_sampled"`
		TokensPrefilled int64  `json:"tokens_prefilled"`
	} `json:"days"`
	AdapterMemoryBytes int64       `json:"adapter_memory_bytes"`
	DiskBytes          int64       `json:"disk_bytes"`
	Quotas             []quotaView `json:"quotas"`
}

// usageDays is how many days the usage page shows (the API allows up to 90).
const usageDays = 30

func (c *Console) usagePage(w http.ResponseWriter, r *http.Request, se *session) {
	var d usageData
	if !c.load(w, r, se, fmt.Sprintf("/api/v1/usage?days=%d", usageDays), &d) {
		return
	}
	slices.Reverse(d.Days) // the latest day first
	c.render(w, r, http.StatusOK, "usage", c.pageOf(se, "Usage and quotas", "usage", "", d))
}
