package console

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/tuft-go/tuft/telemetry"
)

// loginTTL is how long the sign-in form's CSRF cookie lives: long enough to type a key.
// Not a config key: it bounds one form, not a session.
const loginTTL = time.Hour

type loginData struct {
	Error string
}

// loginPage shows the sign-in form with a fresh CSRF token (double submit: the same value
// in an HttpOnly cookie and in the form).
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if c.sessionOf(r) != nil {
		http.Redirect(w, r, Prefix+"/runs", http.StatusSeeOther)
		return
	}
	c.renderLogin(w, r, http.StatusOK, "")
}

func (c *Console) renderLogin(w http.ResponseWriter, r *http.Request, code int, msg string) {
	tok := randomToken()
	c.setCookie(w, r, loginCookie, tok, c.opt.Now().Add(loginTTL))
	c.render(w, r, code, "login", page{Title: "Sign in", CSRF: tok, Data: loginData{Error: msg}})
}

// login signs in with the API key the form posts: the key is checked by the API itself
// (GET /api/v1/auth/apikey/me in process), kept server-side, and the browser gets only
// the session cookie.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	ck, err := r.Cookie(loginCookie)
	if err != nil || !sameToken(ck.Value, r.PostFormValue("csrf")) {
		c.errorPage(w, r, nil, http.StatusForbidden, "Missing or wrong CSRF token: reload the sign-in page.")
		return
	}
	key := strings.TrimSpace(r.PostFormValue("api_key"))
	if key == "" {
		c.renderLogin(w, r, http.StatusBadRequest, "Enter an API key.")
		return
	}
	p, err := c.call(r.Context(), r, key, http.MethodGet, "/api/v1/auth/apikey/me", nil)
	if err != nil {
		c.errorPage(w, r, nil, http.StatusInternalServerError, err.Error())
		return
	}
	if p.Status != http.StatusOK {
		code := p.Status
		if code == http.StatusUnauthorized || code == http.StatusForbidden {
			code = http.StatusUnauthorized
		}
		c.renderLogin(w, r, code, "Sign-in refused: "+p.detail())
		return
	}
	var me struct {
		Details struct {
			Org struct {
				Name string `json:"name"`
			} `json:"org_details"`
		} `json:"details"`
	}
	if err := json.Unmarshal(p.Body, &me); err != nil || me.Details.Org.Name == "" {
		c.errorPage(w, r, nil, http.StatusInternalServerError, "the API's key description has no tenant")
		return
	}
	tenant := me.Details.Org.Name
	// An operator key reads the operator overview; a tenant key gets 403 there.
	op, err := c.call(r.Context(), r, key, http.MethodGet, "/api/v1/admin/overview", nil)
	operator := err == nil && op.Status == http.StatusOK
	se, err := c.sessions.create(key, tenant, operator)
	if errors.Is(err, errFull) {
		c.renderLogin(w, r, http.StatusServiceUnavailable, err.Error())
		return
	}
	c.setCookie(w, r, loginCookie, "", time.Time{})
	c.setCookie(w, r, sessionCookie, se.token, se.expires)
	c.log.InfoContext(r.Context(), "console sign-in", telemetry.LogTenant, tenant, "operator", operator)
	http.Redirect(w, r, Prefix+"/runs", http.StatusSeeOther)
}

// signout ends the session (signedIn checked its CSRF token).
func (c *Console) signout(w http.ResponseWriter, r *http.Request, se *session) {
	c.sessions.end(se.token)
	c.setCookie(w, r, sessionCookie, "", time.Time{})
	c.log.InfoContext(r.Context(), "console sign-out", telemetry.LogTenant, se.tenant)
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}
