package service_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/store/memory"
	"github.com/tuft-go/tuft/telemetry"
)

// failingStore fails writes of keys under prefix while armed.
type failingStore struct {
	store.Store
	prefix string
	armed  atomic.Bool
}

func (f *failingStore) Set(ctx context.Context, key string, v []byte, ttl time.Duration) error {
	if f.armed.Load() && strings.HasPrefix(key, f.prefix) {
		return errors.New("disk full")
	}
	return f.Store.Set(ctx, key, v, ttl)
}

// A write that no caller can hear about (the reaper marking a session expired) is never
// dropped silently: it is counted in tuft.store.write_failures with its reason.
func TestBackgroundWriteFailureIsCounted(t *testing.T) {
	ctx := context.Background()
	ck := &clock{t: time.Unix(1_800_000_000, 0)}
	st := &failingStore{Store: memory.New(), prefix: "session/"}
	reader := sdkmetric.NewManualReader()
	in := telemetry.NewInstruments(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), false)
	svc := startService(t, setup{store: st, now: ck.now, in: in, edit: func(cfg *config.Config) { cfg.Sessions.HeartbeatTimeoutSeconds = 60 }})
	if _, err := svc.CreateSession(ctx, "alice", service.CreateSessionInput{}); err != nil {
		t.Fatal(err)
	}
	st.armed.Store(true)
	ck.add(2 * time.Minute)
	svc.Reap(ctx)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telemetry.MetricStoreWriteFailures {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if r, _ := dp.Attributes.Value(telemetry.MAttrReason); r.AsString() == "session_expired" && dp.Value == 1 {
					return
				}
			}
			t.Fatalf("%s points: %+v", m.Name, m.Data)
		}
	}
	t.Fatalf("no %s{reason=session_expired} recorded", telemetry.MetricStoreWriteFailures)
}
