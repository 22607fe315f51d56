package api

import (
	"container/list"
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/telemetry"
)

// Connection slots. server.max_connections bounds the open client connections, counted
// as they are accepted, before any request (so before any API key). Finding 4 of issue 22:
// a host without a key filled every slot with idle keep-alive connections within seconds,
// and every new connection of every tenant was then closed at once. Three rules keep a
// keyless idle host from holding the slots:
//
//   - When the server is full, a new connection evicts an idle one (waiting for its next
//     request, or for its first), unauthenticated ones first, oldest idle first; only
//     when every connection is busy with a request is the new one closed.
//   - A connection no request of which has carried a valid API key is closed after
//     server.unauthenticated_idle_timeout_seconds idle (instead of
//     server.idle_timeout_seconds).
//   - One remote address holds at most server.max_connections_per_address connections; a
//     new one over that evicts the address's own oldest idle one, or is closed.
//
// Eviction closes a connection only between requests, as the server's own idle timeout
// does; a client reconnects on its next request.

// ConnLimits configure the connection slots.
type ConnLimits struct {
	Max                 int           // server.max_connections
	PerAddress          int           // server.max_connections_per_address
	UnauthenticatedIdle time.Duration // server.unauthenticated_idle_timeout_seconds
	// Instruments receive tuft.http.connections.closed (default: telemetry.Metrics()).
	Instruments *telemetry.Instruments
}

// Conns tracks the server's open connections; install its ConnContext and ConnState on
// the http.Server.
type Conns struct {
	l       ConnLimits
	mu      sync.Mutex
	open    map[net.Conn]*connSlot
	pending map[net.Conn]*connSlot // from ConnContext until StateNew
	perAddr map[string]int
	// idle holds the idle connections in the order they became idle (the front waited
	// longest), keyless and authenticated apart, for all and per address: an eviction
	// takes a front in O(1), however many connections are open.
	idle     idleLists
	addrIdle map[string]*idleLists
	// evicted counts the idle connections closed to make room (for tests and logs).
	evicted int
}

// connSlot is one open connection's slot (connection slots, not request admission).
type connSlot struct {
	c      net.Conn
	addr   string
	idle   bool // waiting for a request (its first, or the next)
	authed bool // a request on it carried a valid API key
	timer  *time.Timer
	cs     *Conns
	// inAll and inAddr are its elements in the idle lists while it is idle.
	inAll, inAddr *list.Element
}

// idleLists are idle connections, oldest first: those no request of which carried a
// key, and the others.
type idleLists struct{ keyless, authed list.List }

func (l *idleLists) of(s *connSlot) *list.List {
	if s.authed {
		return &l.authed
	}
	return &l.keyless
}

// oldest is the connection to evict first: the keyless one idle longest, else the
// authenticated one.
func (l *idleLists) oldest() *connSlot {
	for _, q := range []*list.List{&l.keyless, &l.authed} {
		if e := q.Front(); e != nil {
			return e.Value.(*connSlot)
		}
	}
	return nil
}

// ConnLimitsFrom is the connection limits of the configuration's server section (the
// caller adds Instruments).
func ConnLimitsFrom(s config.Server) ConnLimits {
	return ConnLimits{Max: s.MaxConnections, PerAddress: s.MaxConnectionsPerAddress, UnauthenticatedIdle: s.UnauthenticatedIdleTimeoutSeconds.Duration()}
}

// NewConns returns the slot keeper for l, whose numbers come from the configuration
// (ConnLimitsFrom); a zero one panics naming its key.
func NewConns(l ConnLimits) *Conns {
	config.MustPositive("server.max_connections", l.Max)
	config.MustPositive("server.max_connections_per_address", l.PerAddress)
	config.MustPositive("server.unauthenticated_idle_timeout_seconds", l.UnauthenticatedIdle)
	if l.Instruments == nil {
		l.Instruments = telemetry.Metrics()
	}
	return &Conns{l: l, open: map[net.Conn]*connSlot{}, pending: map[net.Conn]*connSlot{}, perAddr: map[string]int{}, addrIdle: map[string]*idleLists{}}
}

type connKey struct{}

// ConnContext gives each connection's requests its slot, so the tenant layer can mark
// it authenticated (http.Server.ConnContext; called before StateNew).
func (cs *Conns) ConnContext(ctx context.Context, c net.Conn) context.Context {
	s := &connSlot{c: c, addr: hostOf(c.RemoteAddr()), cs: cs}
	cs.mu.Lock()
	cs.pending[c] = s
	cs.mu.Unlock()
	return context.WithValue(ctx, connKey{}, s)
}

// markAuthenticated notes that a request on the connection carried a valid API key: the
// connection keeps server.idle_timeout_seconds from now on.
func markAuthenticated(ctx context.Context) {
	s, _ := ctx.Value(connKey{}).(*connSlot)
	if s == nil {
		return
	}
	cs := s.cs
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if s.authed {
		return
	}
	// A request runs on a busy connection, so s is on no idle list; were it idle, it moves
	// to the authenticated list (the lists are chosen by authed).
	idle := s.idle
	cs.busy(s)
	s.authed = true
	if idle {
		cs.idled(s)
	}
}

func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// ConnState implements http.Server.ConnState.
func (cs *Conns) ConnState(c net.Conn, st http.ConnState) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	switch st {
	case http.StateNew:
		cs.takeSlot(c)
	case http.StateActive:
		if s := cs.open[c]; s != nil {
			cs.busy(s)
		}
	case http.StateIdle:
		if s := cs.open[c]; s != nil {
			cs.idled(s)
		}
	case http.StateClosed, http.StateHijacked:
		if s := cs.open[c]; s != nil {
			cs.release(s)
		}
	}
}

// takeSlot takes a connection slot for a new connection, evicting an idle one when the
// server or the address is full, or closes the new one when every connection there is busy.
func (cs *Conns) takeSlot(c net.Conn) {
	s := cs.pending[c]
	delete(cs.pending, c)
	if s == nil { // a server without ConnContext
		s = &connSlot{c: c, addr: hostOf(c.RemoteAddr()), cs: cs}
	}
	addr := s.addr
	if cs.perAddr[addr] >= cs.l.PerAddress && !cs.evict(addr) {
		cs.closed(telemetry.ConnRefusedAddress)
		_ = c.Close()
		return
	}
	if len(cs.open) >= cs.l.Max && !cs.evict("") {
		cs.closed(telemetry.ConnRefusedFull)
		_ = c.Close()
		return
	}
	cs.open[c] = s
	cs.perAddr[addr]++
	cs.idled(s) // waiting for its first request, which is not authenticated yet
}

// idled marks s idle, at the back of the idle lists; an unauthenticated connection gets
// the short idle timeout.
func (cs *Conns) idled(s *connSlot) {
	cs.busy(s)
	s.idle = true
	s.inAll = cs.idle.of(s).PushBack(s)
	al := cs.addrIdle[s.addr]
	if al == nil {
		al = &idleLists{}
		cs.addrIdle[s.addr] = al
	}
	s.inAddr = al.of(s).PushBack(s)
	if !s.authed {
		s.timer = time.AfterFunc(cs.l.UnauthenticatedIdle, func() { cs.expire(s) })
	}
}

// busy takes s off the idle lists (a request is being read or served, or it is gone).
func (cs *Conns) busy(s *connSlot) {
	s.stopTimer()
	if !s.idle {
		return
	}
	s.idle = false
	cs.idle.of(s).Remove(s.inAll)
	al := cs.addrIdle[s.addr]
	al.of(s).Remove(s.inAddr)
	if al.keyless.Len() == 0 && al.authed.Len() == 0 {
		delete(cs.addrIdle, s.addr)
	}
	s.inAll, s.inAddr = nil, nil
}

// release frees s's slot.
func (cs *Conns) release(s *connSlot) {
	cs.busy(s)
	delete(cs.open, s.c)
	if cs.perAddr[s.addr]--; cs.perAddr[s.addr] <= 0 {
		delete(cs.perAddr, s.addr)
	}
}

// expire closes s if it is still idle and unauthenticated.
func (cs *Conns) expire(s *connSlot) {
	cs.mu.Lock()
	idle := cs.open[s.c] == s && s.idle && !s.authed
	cs.mu.Unlock()
	if idle {
		cs.closed(telemetry.ConnKeylessIdle)
		_ = s.c.Close()
	}
}

func (s *connSlot) stopTimer() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// evict closes the idle connection that has waited longest (of addr, or of anyone when
// addr is ""), an unauthenticated one before any authenticated one. It reports whether
// it freed a slot.
func (cs *Conns) evict(addr string) bool {
	var victim *connSlot
	if addr == "" {
		victim = cs.idle.oldest()
	} else if al := cs.addrIdle[addr]; al != nil {
		victim = al.oldest()
	}
	if victim == nil {
		return false
	}
	// The slot is freed now; the close's StateClosed finds it gone.
	cs.release(victim)
	cs.evicted++
	cs.closed(telemetry.ConnEvictedIdle)
	_ = victim.c.Close()
	return true
}

// closed counts a connection the slots closed, by reason.
func (cs *Conns) closed(reason string) {
	cs.l.Instruments.HTTPConnectionsClosed.Add(context.Background(), 1,
		metric.WithAttributes(attribute.String(telemetry.MAttrReason, reason)))
}

// ConnStats is a snapshot of the connection slots.
type ConnStats struct {
	Open, Idle int // open connections, and those of them waiting for a request
	Evicted    int // idle connections closed so far to make room for new ones
}

// Stats reports the slots' state.
func (cs *Conns) Stats() ConnStats {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return ConnStats{Open: len(cs.open), Idle: cs.idle.keyless.Len() + cs.idle.authed.Len(), Evicted: cs.evicted}
}
