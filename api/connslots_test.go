package api_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tuft-go/tuft/api"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/telemetry"
)

// closedCounts reads tuft.http.connections.closed by reason.
func closedCounts(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telemetry.MetricHTTPConnectionsClosed {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				r, _ := dp.Attributes.Value(telemetry.MAttrReason)
				out[r.AsString()] += dp.Value
			}
		}
	}
	return out
}

// The connection slots step by step, and what they record in
// tuft.http.connections.closed: a new connection at server.max_connections evicts the
// one idle longest (evicted_idle), or is closed when none is idle (refused_full); an idle
// keyless one is closed after the short timeout (keyless_idle_timeout).
func TestConnectionSlotsRecordWhatTheyClose(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	in := telemetry.NewInstruments(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), false)
	cs := api.NewConns(api.ConnLimits{Max: 2, PerAddress: 10, UnauthenticatedIdle: 50 * time.Millisecond, Instruments: in})
	conn := func() net.Conn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		cs.ConnContext(context.Background(), a)
		cs.ConnState(a, http.StateNew)
		return a
	}
	closed := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		ne, ok := err.(net.Error)
		return !(ok && ne.Timeout())
	}
	c1 := conn()
	c2 := conn()
	cs.ConnState(c2, http.StateActive)
	c3 := conn() // evicts c1, the only idle one
	if !closed(c1) || closed(c2) || closed(c3) {
		t.Fatalf("after a third connection: c1 closed %v, c2 %v, c3 %v; want only c1", closed(c1), closed(c2), closed(c3))
	}
	cs.ConnState(c3, http.StateActive)
	c4 := conn() // both busy: refused
	if !closed(c4) {
		t.Fatal("a connection over the limit with none idle stays open")
	}
	cs.ConnState(c2, http.StateIdle) // keyless: closed after 50 ms
	deadline := time.Now().Add(5 * time.Second)
	for !closed(c2) {
		if time.Now().After(deadline) {
			t.Fatal("an idle keyless connection was not closed after its timeout")
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := closedCounts(t, reader)
	want := map[string]int64{telemetry.ConnEvictedIdle: 1, telemetry.ConnRefusedFull: 1, telemetry.ConnKeylessIdle: 1}
	for r, n := range want {
		if got[r] != n {
			t.Errorf("%s{reason=%s} = %d, want %d (all: %v)", telemetry.MetricHTTPConnectionsClosed, r, got[r], n, got)
		}
	}
	if st := cs.Stats(); st.Evicted != 1 {
		t.Errorf("stats: %+v", st)
	}
}

// NewConns keeps no defaults: a zero limit is a wiring bug named by its config key.
func TestNewConnsTakesItsLimitsFromTheConfig(t *testing.T) {
	t.Parallel()
	api.NewConns(api.ConnLimitsFrom(config.Default("").Server))
	msg := func() (msg string) {
		defer func() { msg = fmt.Sprint(recover()) }()
		api.NewConns(api.ConnLimits{PerAddress: 1, UnauthenticatedIdle: time.Second})
		return ""
	}()
	if !strings.Contains(msg, "server.max_connections") {
		t.Fatalf("NewConns with a zero Max: panic %q does not name server.max_connections", msg)
	}
}
