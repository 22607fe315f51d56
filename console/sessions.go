package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"sync"
	"time"
)

// session is one sign-in: the API key stays here, the browser holds only the token.
type session struct {
	token    string
	key      string
	tenant   string
	csrf     string
	operator bool
	created  time.Time
	expires  time.Time
}

// errFull is a sign-in refused because console.max_sessions are held by others.
var errFull = errors.New("the console holds console.max_sessions sign-ins; try again when one expires or signs out")

// sessions holds the sign-ins in memory, bounded in number (console.max_sessions, and
// console.max_sessions_per_tenant per tenant) and in time (console.session_ttl_seconds).
type sessions struct {
	mu        sync.Mutex
	byToken   map[string]*session
	ttl       time.Duration
	max       int
	perTenant int
	now       func() time.Time
}

func newSessions(ttl time.Duration, max, perTenant int, now func() time.Time) *sessions {
	return &sessions{byToken: map[string]*session{}, ttl: ttl, max: max, perTenant: perTenant, now: now}
}

// randomToken is 32 random bytes, URL-safe.
func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// create signs key's tenant in. Over console.max_sessions_per_tenant the tenant's oldest
// sign-in ends; over console.max_sessions (with expired ones dropped) it is refused.
func (s *sessions) create(key, tenant string, operator bool) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var oldest *session
	mine := 0
	for t, se := range s.byToken {
		if !now.Before(se.expires) {
			delete(s.byToken, t)
			continue
		}
		if se.tenant == tenant {
			mine++
			if oldest == nil || se.created.Before(oldest.created) {
				oldest = se
			}
		}
	}
	if mine >= s.perTenant && oldest != nil {
		delete(s.byToken, oldest.token)
	}
	if len(s.byToken) >= s.max {
		return nil, errFull
	}
	se := &session{token: randomToken(), key: key, tenant: tenant, csrf: randomToken(), operator: operator, created: now, expires: now.Add(s.ttl)}
	s.byToken[se.token] = se
	return se, nil
}

// get returns the live session of token, or nil (unknown, expired or ended).
func (s *sessions) get(token string) *session {
	if token == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.byToken[token]
	if se == nil {
		return nil
	}
	if !s.now().Before(se.expires) {
		delete(s.byToken, token)
		return nil
	}
	return se
}

// end signs the session of token out.
func (s *sessions) end(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byToken, token)
}

// sameToken compares two secrets in constant time; an empty one never matches.
func sameToken(a, b string) bool {
	return a != "" && b != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
