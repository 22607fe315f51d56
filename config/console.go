package config

// Console configures the web console `tuft launch` serves at /console (docs/console.md).
type Console struct {
	// Enabled mounts the console; off, /console answers the API's not-found reply.
	Enabled bool `yaml:"enabled"`
	// SessionTTLSeconds is how long a console sign-in lasts (the cookie's expiry and the
	// server-side session's): then the user signs in again with the API key.
	SessionTTLSeconds Seconds `yaml:"session_ttl_seconds"`
	// MaxSessions bounds the console sign-ins held in memory, all tenants: a sign-in over
	// it is refused (503) until one expires or signs out.
	MaxSessions int `yaml:"max_sessions"`
	// MaxSessionsPerTenant bounds one tenant's sign-ins: a new one over it ends the
	// tenant's oldest, so one tenant cannot fill max_sessions.
	MaxSessionsPerTenant int `yaml:"max_sessions_per_tenant"`
}

func (c Console) validate(v *validator) {
	if !c.Enabled {
		return
	}
	v.secs("session_ttl_seconds", c.SessionTTLSeconds, 60, 30*86400)
	v.atLeast("max_sessions", int64(c.MaxSessions), 1)
	v.atLeast("max_sessions_per_tenant", int64(c.MaxSessionsPerTenant), 1)
	if c.MaxSessionsPerTenant > c.MaxSessions && c.MaxSessions >= 1 {
		v.bad("max_sessions_per_tenant", "%d must not exceed console.max_sessions (%d)", c.MaxSessionsPerTenant, c.MaxSessions)
	}
}
