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
	if se := c.sessionOf(r); se != nil {
		http.Redirect(w, r, landing(se), http.StatusSeeOther)
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
	tenant, operator, refusal, err := c.identify(r, key)
	if err != nil {
		c.errorPage(w, r, nil, http.StatusInternalServerError, err.Error())
		return
	}
	if refusal != "" {
		c.renderLogin(w, r, http.StatusUnauthorized, "Sign-in refused: "+refusal)
		return
	}
	if old := c.sessionOf(r); old != nil {
		c.sessions.end(old.token) // a new sign-in replaces this browser's old one
	}
	se, err := c.sessions.create(key, tenant, operator)
	if errors.Is(err, errFull) {
		c.renderLogin(w, r, http.StatusServiceUnavailable, err.Error())
		return
	}
	c.setCookie(w, r, loginCookie, "", time.Time{})
	c.setCookie(w, r, sessionCookie, se.token, se.expires)
	c.log.InfoContext(r.Context(), "console sign-in", telemetry.LogTenant, tenant, "operator", operator)
	http.Redirect(w, r, landing(se), http.StatusSeeOther)
}

// landing is the first page of a session: the runs, or the operator overview for the
// operator key, which opens nothing else.
func landing(se *session) string {
	if se.tenant == operatorLabel {
		return Prefix + "/admin"
	}
	return Prefix + "/runs"
}

// operatorLabel is the operator's name in a console session: no tenant is named so (a
// tenant name holds no colon), so the operator's sign-ins are bounded apart.
const operatorLabel = "operator:"

// identify asks the API who key is: a tenant's key (GET /api/v1/auth/apikey/me answers
// its tenant; it is also the operator's if the operator overview opens to it), or the
// operator key (auth.operator_key_sha256), which opens only the operator overview. A key
// that is neither gets the API's refusal.
func (c *Console) identify(r *http.Request, key string) (tenant string, operator bool, refusal string, err error) {
	me, err := c.call(r.Context(), r, key, http.MethodGet, "/api/v1/auth/apikey/me", nil)
	if err != nil {
		return "", false, "", err
	}
	op, err := c.call(r.Context(), r, key, http.MethodGet, "/api/v1/admin/overview", nil)
	if err != nil {
		return "", false, "", err
	}
	operator = op.Status == http.StatusOK
	if me.Status != http.StatusOK {
		if operator {
			return operatorLabel, true, "", nil
		}
		return "", false, me.detail(), nil
	}
	var who struct {
		Details struct {
			Org struct {
				Name string `json:"name"`
			} `json:"org_details"`
		} `json:"details"`
	}
	if err := json.Unmarshal(me.Body, &who); err != nil || who.Details.Org.Name == "" {
		return "", false, "", errors.New("the API's key description has no tenant")
	}
	return who.Details.Org.Name, operator, "", nil
}

// signout ends the session (signedIn checked its CSRF token).
func (c *Console) signout(w http.ResponseWriter, r *http.Request, se *session) {
	c.sessions.end(se.token)
	c.setCookie(w, r, sessionCookie, "", time.Time{})
	c.log.InfoContext(r.Context(), "console sign-out", telemetry.LogTenant, se.tenant)
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}
