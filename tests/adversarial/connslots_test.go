package adversarial

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
)

// Finding 4 of issue 22: server.max_connections counts connections before any API key,
// and a host without a key filled every slot with idle keep-alive connections (one
// keyless request each, or none) within seconds; every new connection of every tenant
// was then closed at once. Now a new connection evicts the one idle longest (keyless
// first), so the attack costs a victim at most a reconnect. The attacker keeps the server
// full throughout: it opens connections as fast as it can, half of them sending one
// keyless request and idling, half sending nothing. The victim connects from another
// address (127.0.0.2) with a fresh connection per request (so each of its requests needs
// a slot), and its small samples must stay within twice their idle latency.
func TestVictimLatencyIdleConnections(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Server.MaxConnections = 64
	s := testenv.Start(t, cfg)
	addr := strings.TrimPrefix(s.URL(), "http://")

	b := newTenant(t, s.URL(), testenv.KeyB)
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	v := &victim{t: t, base: s.URL(), key: testenv.KeyB, http: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, a)
		}}}}
	v.sampler = b.sampler(b.session(), 1, map[string]any{"base_model": testenv.Model})
	v.measure(2) // warm up
	idle := v.measure(12)

	// The attack: fill the slots, then keep opening idle connections.
	var mu sync.Mutex
	var held []net.Conn
	open := func(i int) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		if i%2 == 0 {
			_, _ = io.WriteString(c, "GET /api/v1/healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if r, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
			}
		}
		mu.Lock()
		held = append(held, c)
		if len(held) > 4*cfg.Server.MaxConnections {
			held[0].Close() // the server evicted it long ago
			held = held[1:]
		}
		mu.Unlock()
	}
	for i := 0; i < 2*cfg.Server.MaxConnections; i++ {
		open(i)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			open(i)
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	st := s.Conns.Stats()
	if st.Open < cfg.Server.MaxConnections-4 {
		t.Fatalf("the attack holds %d of %d connections: not an attack", st.Open, cfg.Server.MaxConnections)
	}
	attacked := v.measure(12)
	close(stop)
	wg.Wait()
	st = s.Conns.Stats()
	t.Logf("connections open %d, evicted %d", st.Open, st.Evicted)
	latencyReport(t, "idle connections", idle, attacked, connAttackSlack)
}
