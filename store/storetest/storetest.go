package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tuft-go/tuft/store"
)

// Opener opens a store on a namespace; calling it again with the same namespace must
// reach the same data (a reopen).
type Opener func(t *testing.T, namespace string) store.Store

// Clock is a clock the suite moves, for stores that take one: the expiry cases then
// advance it instead of waiting. NewClock starts it at the current time.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a Clock at the current time.
func NewClock() *Clock {
	c := &Clock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

// Now is the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Option configures Run.
type Option func(*suite)

type suite struct{ clock *Clock }

// WithClock says that the stores the opener returns tell time by c.
func WithClock(c *Clock) Option { return func(s *suite) { s.clock = c } }

// pass lets d pass for the stores: on the suite's clock where they take one, else (Redis
// keeps its own time) by waiting.
func (s *suite) pass(d time.Duration) {
	if s.clock != nil {
		s.clock.Advance(d)
		return
	}
	time.Sleep(d)
}

// Run runs the suite.
func Run(t *testing.T, open Opener, opts ...Option) {
	var cfg suite
	for _, o := range opts {
		o(&cfg)
	}
	ctx := context.Background()
	t.Run("GetSetOverwrite", func(t *testing.T) {
		s := open(t, "a")
		if _, err := s.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing key: %v", err)
		}
		must(t, s.Set(ctx, "k", []byte("v1"), 0))
		must(t, s.Set(ctx, "k", []byte("v2"), 0))
		if v, err := s.Get(ctx, "k"); err != nil || string(v) != "v2" {
			t.Fatalf("get: %q %v", v, err)
		}
		bin := []byte{0, 1, 2, 255, 0}
		must(t, s.Set(ctx, "bin", bin, 0))
		if v, _ := s.Get(ctx, "bin"); !bytes.Equal(v, bin) {
			t.Fatalf("binary value: %v", v)
		}
		big := bytes.Repeat([]byte("x"), 1<<20)
		must(t, s.Set(ctx, "big", big, 0))
		if v, _ := s.Get(ctx, "big"); !bytes.Equal(v, big) {
			t.Fatal("1 MiB value")
		}
		if err := s.Set(ctx, "", []byte("x"), 0); err == nil {
			t.Fatal("empty key accepted")
		}
	})
	t.Run("TTL", func(t *testing.T) {
		s := open(t, "ttl")
		must(t, s.Set(ctx, "short", []byte("x"), 150*time.Millisecond))
		must(t, s.Set(ctx, "long", []byte("y"), time.Hour))
		if _, err := s.Get(ctx, "short"); err != nil {
			t.Fatal("expired too early")
		}
		cfg.pass(300 * time.Millisecond)
		if _, err := s.Get(ctx, "short"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("not expired: %v", err)
		}
		n := 0
		must(t, s.Scan(ctx, "", func(k string, _ []byte) error { n++; return nil }))
		if n != 1 {
			t.Fatalf("scan sees %d keys, want only the live one", n)
		}
		ok, err := s.SetNX(ctx, "short", []byte("z"), 0)
		if err != nil || !ok {
			t.Fatalf("SetNX after expiry: %v %v", ok, err)
		}
	})
	t.Run("SetNX", func(t *testing.T) {
		s := open(t, "nx")
		ok, err := s.SetNX(ctx, "k", []byte("1"), 0)
		if err != nil || !ok {
			t.Fatalf("first SetNX: %v %v", ok, err)
		}
		ok, err = s.SetNX(ctx, "k", []byte("2"), 0)
		if err != nil || ok {
			t.Fatalf("second SetNX wrote: %v %v", ok, err)
		}
		if v, _ := s.Get(ctx, "k"); string(v) != "1" {
			t.Fatalf("value %q", v)
		}
	})
	t.Run("DelAndScan", func(t *testing.T) {
		s := open(t, "scan")
		for _, k := range []string{"run/1", "run/2", "run/3", "runx", "a*[b]?/1", "a*[b]?/2", "aZ/1", "other"} {
			must(t, s.Set(ctx, k, []byte(k), 0))
		}
		must(t, s.Del(ctx, "run/2", "missing"))
		got := scan(t, s, "run/")
		if strings.Join(got, ",") != "run/1,run/3" {
			t.Fatalf("scan run/: %v", got)
		}
		if got := scan(t, s, "a*[b]?/"); strings.Join(got, ",") != "a*[b]?/1,a*[b]?/2" {
			t.Fatalf("glob characters must be literal: %v", got)
		}
		stop := errors.New("stop")
		n := 0
		err := s.Scan(ctx, "run/", func(string, []byte) error { n++; return stop })
		if !errors.Is(err, stop) || n != 1 {
			t.Fatalf("callback error: %v after %d", err, n)
		}
	})
	t.Run("ApplyIsAtomic", func(t *testing.T) {
		s := open(t, "apply")
		must(t, s.Set(ctx, "old", []byte("x"), 0))
		must(t, s.Apply(ctx, []store.Op{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2"), TTL: time.Hour}, {Key: "old"}}))
		if v, _ := s.Get(ctx, "b"); string(v) != "2" {
			t.Fatal("apply set")
		}
		if _, err := s.Get(ctx, "old"); !errors.Is(err, store.ErrNotFound) {
			t.Fatal("apply delete")
		}
		err := s.Apply(ctx, []store.Op{{Key: "c", Value: []byte("3")}, {Key: "", Value: []byte("bad")}})
		if err == nil {
			t.Fatal("an invalid op was accepted")
		}
		if _, err := s.Get(ctx, "c"); !errors.Is(err, store.ErrNotFound) {
			t.Fatal("a failed Apply was partly applied")
		}
	})
	t.Run("ClearOnlyOwnNamespace", func(t *testing.T) {
		a, b := open(t, "ns1"), open(t, "ns2")
		must(t, a.Set(ctx, "k", []byte("a"), 0))
		must(t, b.Set(ctx, "k", []byte("b"), 0))
		must(t, a.Clear(ctx))
		if _, err := a.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
			t.Fatal("clear")
		}
		if v, err := b.Get(ctx, "k"); err != nil || string(v) != "b" {
			t.Fatalf("clear touched another namespace: %q %v", v, err)
		}
	})
	t.Run("ConcurrentWriters", func(t *testing.T) {
		s := open(t, "conc")
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					k := fmt.Sprintf("g%d/%d", g, i)
					if err := s.Set(ctx, k, []byte(k), 0); err != nil {
						t.Error(err)
						return
					}
					if v, err := s.Get(ctx, k); err != nil || string(v) != k {
						t.Errorf("read back %q: %q %v", k, v, err)
						return
					}
				}
			}(g)
		}
		wg.Wait()
		if n := len(scan(t, s, "g")); n != 400 {
			t.Fatalf("%d keys, want 400", n)
		}
	})
	t.Run("Reopen", func(t *testing.T) {
		s := open(t, "persist")
		must(t, s.Set(ctx, "k", []byte("v"), 0))
		s2 := open(t, "persist")
		if v, err := s2.Get(ctx, "k"); s.Kind() != "memory" && (err != nil || string(v) != "v") {
			t.Fatalf("after reopen: %q %v", v, err)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func scan(t *testing.T, s store.Store, prefix string) []string {
	t.Helper()
	var keys []string
	must(t, s.Scan(context.Background(), prefix, func(k string, v []byte) error {
		if string(v) != k && !strings.HasPrefix(k, "g") {
			t.Errorf("scan value of %q is %q", k, v)
		}
		keys = append(keys, k)
		return nil
	}))
	sortStrings(keys)
	return keys
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// StartRedis returns the URL of a real Redis for tests: TUFT_TEST_REDIS_URL, or a
// redis-server started on a free loopback port for this test. Without either the test is
// skipped, unless TUFT_REQUIRE_REDIS=1 (CI), where that is a failure.
func StartRedis(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("TUFT_TEST_REDIS_URL"); u != "" {
		return u
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("TUFT_REQUIRE_REDIS") == "1" {
			t.Fatal("redis-server is not installed and TUFT_REQUIRE_REDIS=1 (run scripts/setup.sh)")
		}
		t.Skip("redis-server not installed; set TUFT_TEST_REDIS_URL or install redis-server")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// Polls its port: the server gives no other sign that it is ready.
	for i := 0; i < 100; i++ {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return "redis://" + addr + "/0"
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("redis-server did not start")
	return ""
}
