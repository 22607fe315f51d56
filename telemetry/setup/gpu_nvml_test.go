//go:build linux && cgo && nvml

package setup

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tuft-go/tuft/telemetry"
)

// On a machine with an NVIDIA driver and GPU the gauges carry real readings; elsewhere
// NVML's clean refusal is checked instead.
func TestNVMLGauges(t *testing.T) {
	t.Parallel()
	src, err := gpuFactory()
	if err != nil {
		t.Logf("no GPU here: %v", err)
		if src != nil {
			t.Fatal("a source came back with an error")
		}
		t.Skip("NVML unavailable on this machine")
	}
	samples, err := src.Sample()
	if err != nil || len(samples) == 0 {
		t.Fatalf("sample: %v %v", samples, err)
	}
	for _, s := range samples {
		t.Logf("gpu %s: %.0f%% busy, %d / %d MiB", s.ID, s.UtilizationPct, s.MemoryUsedBytes>>20, s.MemoryTotalBytes>>20)
		if s.MemoryTotalBytes <= 0 || s.MemoryUsedBytes < 0 || s.MemoryUsedBytes > s.MemoryTotalBytes || s.UtilizationPct < 0 || s.UtilizationPct > 100 {
			t.Errorf("implausible reading %+v", s)
		}
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	g, err := startResourceGauges(mp, time.Hour, src)
	if err != nil {
		t.Fatal(err)
	}
	defer g.stop()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if v, ok := p.Attributes.Value(telemetry.MAttrGPUID); ok && v.AsString() == samples[0].ID {
						found[m.Name] = true
					}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					if v, ok := p.Attributes.Value(telemetry.MAttrGPUID); ok && v.AsString() == samples[0].ID {
						found[m.Name] = true
					}
				}
			}
		}
	}
	for _, name := range []string{telemetry.MetricGPUUtilization, telemetry.MetricGPUMemoryUsed, telemetry.MetricGPUMemoryTotal} {
		if !found[name] {
			t.Errorf("%s with %s=%s not exported", name, telemetry.MAttrGPUID, samples[0].ID)
		}
	}
}
