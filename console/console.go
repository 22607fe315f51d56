package console

import (
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/telemetry"
	"github.com/tuft-go/tuft/telemetry/httpserver"
)

// Prefix is where the console is mounted.
const Prefix = "/console"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Cookie names: the session token, and the sign-in form's CSRF token (double submit).
const (
	sessionCookie = "tuft_console"
	loginCookie   = "tuft_console_login"
)

// contentSecurityPolicy allows only the console's own scripts, styles and connections: no
// inline script or style, no framing, no foreign form targets.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"

// Options configure the console.
type Options struct {
	// API is the API's handler: every request of the console passes through it, in
	// process, with the signed-in key.
	API http.Handler
	// Config is the console section (console.*).
	Config config.Console
	// PublicURL is server.public_url: an https one marks the cookies Secure even when TLS
	// ends at a proxy in front of the server.
	PublicURL string
	Logger    *slog.Logger
	// Now is the clock of session expiry (default time.Now).
	Now func() time.Time
	// TracerProvider and Instruments receive the pages' HTTP server spans and durations
	// (the forwarded API requests get theirs from the API's handler).
	TracerProvider trace.TracerProvider
	Instruments    *telemetry.Instruments
}

// Console serves /console.
type Console struct {
	opt      Options
	api      http.Handler
	log      *slog.Logger
	sessions *sessions
	pages    http.Handler // the page routes, behind the HTTP server telemetry
	allow    *http.ServeMux
	tmpl     map[string]*template.Template
	cop      *http.CrossOriginProtection
	static   http.Handler
	secure   bool
}

// New builds the console. Its numbers come from the config (a zero one panics naming its
// key, as config.Validate refuses it first).
func New(o Options) (*Console, error) {
	config.MustPositive("console.session_ttl_seconds", o.Config.SessionTTLSeconds)
	config.MustPositive("console.max_sessions", o.Config.MaxSessions)
	config.MustPositive("console.max_sessions_per_tenant", o.Config.MaxSessionsPerTenant)
	if o.API == nil {
		return nil, errors.New("console: no API handler")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	tmpl, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	c := &Console{opt: o, api: o.API, log: o.Logger, tmpl: tmpl, cop: http.NewCrossOriginProtection(),
		sessions: newSessions(o.Config.SessionTTLSeconds.Duration(), o.Config.MaxSessions, o.Config.MaxSessionsPerTenant, o.Now),
		static:   http.StripPrefix(Prefix+"/static/", http.FileServerFS(sub))}
	if u, err := url.Parse(o.PublicURL); err == nil && u.Scheme == "https" {
		c.secure = true
	}
	c.allow = allowlist()
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix, c.index)
	mux.HandleFunc("GET "+Prefix+"/{$}", c.index)
	mux.HandleFunc("GET "+Prefix+"/login", c.loginPage)
	mux.HandleFunc("POST "+Prefix+"/login", c.login)
	mux.HandleFunc("POST "+Prefix+"/signout", c.signedIn(c.signout))
	mux.HandleFunc("GET "+Prefix+"/static/", c.serveStatic)
	mux.HandleFunc("GET "+Prefix+"/runs", c.signedIn(c.runsPage))
	mux.HandleFunc("GET "+Prefix+"/runs/{run_id}", c.signedIn(c.runPage))
	mux.HandleFunc("GET "+Prefix+"/checkpoints", c.signedIn(c.checkpointsPage))
	mux.HandleFunc("POST "+Prefix+"/checkpoints/action", c.signedIn(c.checkpointAction))
	mux.HandleFunc("GET "+Prefix+"/playground", c.signedIn(c.playgroundPage))
	mux.HandleFunc("GET "+Prefix+"/usage", c.signedIn(c.usagePage))
	mux.HandleFunc("GET "+Prefix+"/sessions/{session_id}", c.signedIn(c.sessionPage))
	mux.HandleFunc("GET "+Prefix+"/sessions/{session_id}/trace", c.signedIn(c.traceDownload))
	mux.HandleFunc("GET "+Prefix+"/admin", c.signedIn(c.adminPage))
	mux.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		c.errorPage(w, r, nil, http.StatusNotFound, "No page "+r.URL.Path+".")
	})
	c.pages = httpserver.NewHandler(mux, telemetry.WithTracerProvider(o.TracerProvider), telemetry.WithInstruments(o.Instruments))
	return c, nil
}

// Handles reports whether path is the console's (the server sends it here, the rest to
// the API).
func Handles(path string) bool {
	return path == Prefix || strings.HasPrefix(path, Prefix+"/")
}

// ServeHTTP implements http.Handler.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if !strings.HasPrefix(r.URL.Path, Prefix+"/static/") {
		h.Set("Cache-Control", "no-store")
	}
	if !safeMethod(r.Method) {
		// A state change from another site is refused before anything reads it: the
		// browser's Sec-Fetch-Site, else Origin against Host (net/http's CSRF check).
		if err := c.cop.Check(r); err != nil {
			c.errorPage(w, r, nil, http.StatusForbidden, "Cross-origin request refused.")
			return
		}
	}
	if strings.HasPrefix(r.URL.Path, Prefix+"/api/") {
		c.forward(w, r)
		return
	}
	c.pages.ServeHTTP(w, r)
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// serveStatic serves the embedded scripts and styles. They change only with the binary,
// so the browser revalidates rather than keeps them.
func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	c.static.ServeHTTP(w, r)
}

// isSecure reports whether the cookies must be Secure: the request came over TLS, or the
// server's public URL is https.
func (c *Console) isSecure(r *http.Request) bool {
	return c.secure || r.TLS != nil
}

// sessionOf is r's live session, or nil.
func (c *Console) sessionOf(r *http.Request) *session {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	return c.sessions.get(ck.Value)
}

// csrfOK checks a state-changing request's CSRF token: the X-CSRF-Token header or the
// form field csrf must be the session's.
func csrfOK(r *http.Request, se *session) bool {
	if t := r.Header.Get("X-CSRF-Token"); t != "" {
		return sameToken(t, se.csrf)
	}
	return sameToken(r.PostFormValue("csrf"), se.csrf)
}

// signedIn runs f for a signed-in user; without a session a page redirects to the
// sign-in form. A state-changing request also needs the session's CSRF token.
func (c *Console) signedIn(f func(w http.ResponseWriter, r *http.Request, se *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		se := c.sessionOf(r)
		if se == nil {
			if !safeMethod(r.Method) {
				c.errorPage(w, r, nil, http.StatusForbidden, "Not signed in.")
				return
			}
			http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
			return
		}
		if !safeMethod(r.Method) {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if !csrfOK(r, se) {
				c.errorPage(w, r, se, http.StatusForbidden, "Missing or wrong CSRF token.")
				return
			}
		}
		f(w, r, se)
	}
}

// maxFormBytes bounds the console's own forms (sign-in, sign-out): an API key and a token.
// Not a config key: the forms have two short fields, whatever the deployment.
const maxFormBytes = 16 << 10

func (c *Console) index(w http.ResponseWriter, r *http.Request) {
	se := c.sessionOf(r)
	if se == nil {
		http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, landing(se), http.StatusSeeOther)
}

func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, name, value string, expires time.Time) {
	ck := &http.Cookie{Name: name, Value: value, Path: Prefix, HttpOnly: true, Secure: c.isSecure(r), SameSite: http.SameSiteStrictMode}
	if expires.IsZero() {
		ck.MaxAge = -1
	} else {
		ck.Expires = expires.UTC()
		ck.MaxAge = int(expires.Sub(c.opt.Now()).Seconds())
	}
	http.SetCookie(w, ck)
}
