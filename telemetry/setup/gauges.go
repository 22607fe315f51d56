package setup

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/mem"
	"github.com/shirou/gopsutil/v4/process"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tuft-go/tuft/telemetry"
)

// GPUSource reports per-device GPU figures; gpu_nvml.go implements it with NVML when built
// with `-tags nvml` (cgo). Tests use a fake.
type GPUSource interface {
	Sample() ([]GPUSample, error)
	Close()
}

// GPUSample is one device's reading.
type GPUSample struct {
	ID               string
	UtilizationPct   float64
	MemoryUsedBytes  int64
	MemoryTotalBytes int64
}

type resourceSnapshot struct {
	cpuPct, memPct         float64
	memUsed, memTotal, rss int64
	gpus                   []GPUSample
}

// resourceGauges samples in one background goroutine; the observable callbacks only
// read the cached snapshot, so a collection never blocks on /proc or NVML.
type resourceGauges struct {
	mu   sync.Mutex
	snap resourceSnapshot
	gpu  GPUSource
	done chan struct{}
	wg   sync.WaitGroup
	reg  metric.Registration
}

var gpuFactory = func() (GPUSource, error) { return nil, fmt.Errorf("GPU metrics disabled: built without the nvml tag") }

// startResourceGauges registers the gauges on mp and samples every interval; gpu nil
// means NVML where built in.
func startResourceGauges(mp metric.MeterProvider, every time.Duration, gpu GPUSource) (*resourceGauges, error) {
	g := &resourceGauges{done: make(chan struct{}), gpu: gpu}
	if g.gpu == nil {
		src, err := gpuFactory()
		if err != nil {
			fmt.Fprintln(os.Stderr, "telemetry:", err)
		} else {
			g.gpu = src
		}
	}
	m := mp.Meter(telemetry.MeterResources)
	cpuG, _ := m.Float64ObservableGauge(telemetry.MetricCPUUtilization, metric.WithUnit("%"))
	memUsed, _ := m.Int64ObservableGauge(telemetry.MetricMemoryUsed, metric.WithUnit("By"))
	memTotal, _ := m.Int64ObservableGauge(telemetry.MetricMemoryTotal, metric.WithUnit("By"))
	memPct, _ := m.Float64ObservableGauge(telemetry.MetricMemoryUtilization, metric.WithUnit("%"))
	rss, _ := m.Int64ObservableGauge(telemetry.MetricProcessMemoryUsed, metric.WithUnit("By"))
	insts := []metric.Observable{cpuG, memUsed, memTotal, memPct, rss}
	var gpuU metric.Float64ObservableGauge
	var gpuUsed, gpuTotal metric.Int64ObservableGauge
	if g.gpu != nil {
		gpuU, _ = m.Float64ObservableGauge(telemetry.MetricGPUUtilization, metric.WithUnit("%"))
		gpuUsed, _ = m.Int64ObservableGauge(telemetry.MetricGPUMemoryUsed, metric.WithUnit("By"))
		gpuTotal, _ = m.Int64ObservableGauge(telemetry.MetricGPUMemoryTotal, metric.WithUnit("By"))
		insts = append(insts, gpuU, gpuUsed, gpuTotal)
	}
	g.sample()
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		g.mu.Lock()
		s := g.snap
		g.mu.Unlock()
		o.ObserveFloat64(cpuG, s.cpuPct)
		o.ObserveInt64(memUsed, s.memUsed)
		o.ObserveInt64(memTotal, s.memTotal)
		o.ObserveFloat64(memPct, s.memPct)
		o.ObserveInt64(rss, s.rss)
		for _, d := range s.gpus {
			a := metric.WithAttributes(attribute.String(telemetry.MAttrGPUID, d.ID))
			o.ObserveFloat64(gpuU, d.UtilizationPct, a)
			o.ObserveInt64(gpuUsed, d.MemoryUsedBytes, a)
			o.ObserveInt64(gpuTotal, d.MemoryTotalBytes, a)
		}
		return nil
	}, insts...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource gauges: %w", err)
	}
	g.reg = reg
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-g.done:
				return
			case <-t.C:
				g.sample()
			}
		}
	}()
	return g, nil
}

func (g *resourceGauges) sample() {
	var s resourceSnapshot
	if p, err := cpu.Percent(0, false); err == nil && len(p) > 0 {
		s.cpuPct = p[0]
	}
	if vm, err := mem.VirtualMemory(); err == nil {
		s.memUsed, s.memTotal, s.memPct = int64(vm.Used), int64(vm.Total), vm.UsedPercent
	}
	// Inside a container, the cgroup's limit is what the process can really use.
	if limit, used, ok := cgroupMemory(); ok && (s.memTotal == 0 || limit < s.memTotal) {
		s.memTotal, s.memUsed = limit, used
		s.memPct = 100 * float64(used) / float64(limit)
	}
	if p, err := process.NewProcess(int32(os.Getpid())); err == nil {
		if mi, err := p.MemoryInfo(); err == nil {
			s.rss = int64(mi.RSS)
		}
	}
	if g.gpu != nil {
		if d, err := g.gpu.Sample(); err == nil {
			s.gpus = d
		}
	}
	g.mu.Lock()
	g.snap = s
	g.mu.Unlock()
}

// cgroupMemory reads cgroup v2's memory.max and memory.current.
func cgroupMemory() (limit, used int64, ok bool) {
	b, err := os.ReadFile("/sys/fs/cgroup/memory.max")
	if err != nil {
		return 0, 0, false
	}
	v := strings.TrimSpace(string(b))
	if v == "max" {
		return 0, 0, false
	}
	limit, err = strconv.ParseInt(v, 10, 64)
	if err != nil || limit <= 0 {
		return 0, 0, false
	}
	b, err = os.ReadFile("/sys/fs/cgroup/memory.current")
	if err != nil {
		return 0, 0, false
	}
	used, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return limit, used, err == nil
}

func (g *resourceGauges) stop() {
	close(g.done)
	g.wg.Wait()
	if g.reg != nil {
		_ = g.reg.Unregister()
	}
	if g.gpu != nil {
		g.gpu.Close()
	}
}
