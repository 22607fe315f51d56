package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
	"github.com/tuft-go/tuft/store/storetest"
	"github.com/tuft-go/tuft/telemetry"
	"github.com/tuft-go/tuft/telemetry/setup"
)

// runLoad has `clients` concurrent clients, each with its own training run, submit a
// trivial operation (optim_step on a no-op executor) and retrieve its result, until
// total operations are done. It returns each submit+retrieve latency and the wall time.
// The load generator shares the machine with the server, so it is kept lean: request
// bodies are built with append, and replies are checked with a byte search, not decoded.
func runLoad(b testing.TB, url string, clients, total int) ([]time.Duration, time.Duration) {
	type runner struct {
		model string
		seq   int
	}
	rs := make([]*runner, clients)
	for i := range rs {
		c := testenv.NewClient(b, url, testenv.KeyA)
		se := c.NewSession()
		modelID := c.NewTrainingRun(se, map[string]any{"rank": 1})
		rs[i] = &runner{model: modelID, seq: 1}
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients + 1, DisableCompression: true}, Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	post := func(path string, body []byte) []byte {
		req, err := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(body))
		if err != nil {
			b.Error(err)
			return nil
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", testenv.KeyA)
		resp, err := hc.Do(req)
		if err != nil {
			b.Error(err)
			return nil
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Errorf("%s: %d %s", path, resp.StatusCode, out)
			return nil
		}
		return out
	}
	fb := forwardBackwardBody()
	var mu sync.Mutex
	lat := make([]time.Duration, 0, total)
	per := total / clients
	if per < 1 {
		per = 1
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Add(1)
		go func(r *runner) {
			defer wg.Done()
			local := make([]time.Duration, 0, per)
			var body []byte
			for i := 0; i < per; i++ {
				t0 := time.Now()
				body = append(body[:0], `{"model_id":"`...)
				body = append(body, r.model...)
				body = append(body, `","seq_id":`...)
				body = strconv.AppendInt(body, int64(r.seq), 10)
				route := "/api/v1/optim_step"
				if fb != nil {
					route = "/api/v1/forward_backward"
					body = append(body, fb...)
				} else {
					body = append(body, `,"adam_params":{"learning_rate":0.001}}`...)
				}
				out := post(route, body)
				r.seq++
				id := requestID(out)
				if id == "" {
					b.Errorf("optim_step reply without request_id: %s", out)
					return
				}
				body = append(body[:0], `{"request_id":"`...)
				body = append(body, id...)
				body = append(body, `"}`...)
				if res := post("/api/v1/retrieve_future", body); !bytes.Contains(res, []byte(`"metrics"`)) {
					b.Errorf("retrieve_future %s: %s", id, res)
					return
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}(r)
	}
	wg.Wait()
	return lat, time.Since(start)
}

// forwardBackwardBody is the tail of a forward_backward request (after model_id and
// seq_id) of one cross-entropy datum of TUFT_BENCH_FB_TOKENS tokens, or nil when the
// load is optim_step (TUFT_BENCH_FB_TOKENS unset).
func forwardBackwardBody() []byte {
	var n int
	if _, err := fmt.Sscan(os.Getenv("TUFT_BENCH_FB_TOKENS"), &n); err != nil || n <= 0 {
		return nil
	}
	var tok, tgt []byte
	for i := 0; i < n; i++ {
		if i > 0 {
			tok, tgt = append(tok, ','), append(tgt, ',')
		}
		tok = strconv.AppendInt(tok, int64(1+i%50), 10)
		tgt = strconv.AppendInt(tgt, int64(1+(i+1)%50), 10)
	}
	return []byte(`,"forward_backward_input":{"loss_fn":"cross_entropy","data":[{"model_input":{"chunks":[{"type":"encoded_text","tokens":[` +
		string(tok) + `]}]},"loss_fn_inputs":{"target_tokens":{"data":[` + string(tgt) + `],"dtype":"int64"}}}]}}`)
}

// loadInChild runs the load generator in a child process (this test binary, see
// TestLoadGenerator), so that its allocations and garbage collections do not land on the
// server's heap: in a deployment the clients are other processes. Both share the cores.
func loadInChild(b *testing.B, url string, clients, total int) ([]time.Duration, time.Duration) {
	lat, wall, _ := loadInChildCPU(b, url, clients, total)
	return lat, wall
}

// loadInChildCPU is loadInChild that also returns the load generator's CPU time.
func loadInChildCPU(b *testing.B, url string, clients, total int) ([]time.Duration, time.Duration, time.Duration) {
	b.Helper()
	b.StopTimer()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLoadGenerator$", "-test.count=1", "-test.v")
	// The load generator is test harness, not the server: a relaxed GC keeps its own
	// collection pauses out of the latencies it measures.
	cmd.Env = append(os.Environ(), "TUFT_LOADGEN_URL="+url, fmt.Sprintf("TUFT_LOADGEN=%d,%d", clients, total), "GOGC=400")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b.StartTimer()
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("load generator: %v\n%s\n%s", err, out, stderr.Bytes())
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "LOADGEN" {
			continue
		}
		wall, _ := strconv.ParseInt(f[1], 10, 64)
		lat := make([]time.Duration, 0, len(f)-2)
		for _, x := range f[2:] {
			v, _ := strconv.ParseInt(x, 10, 64)
			lat = append(lat, time.Duration(v))
		}
		return lat, time.Duration(wall), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	b.Fatalf("load generator printed no result:\n%s", out)
	return nil, 0, 0
}

// TestLoadGenerator is the benchmarks' client process: TUFT_LOADGEN_URL and
// TUFT_LOADGEN=clients,total select it; it prints its latencies. Skipped otherwise.
func TestLoadGenerator(t *testing.T) {
	url := os.Getenv("TUFT_LOADGEN_URL")
	if url == "" {
		t.Skip("the control-plane benchmark runs this as its client process")
	}
	var clients, total int
	if _, err := fmt.Sscanf(os.Getenv("TUFT_LOADGEN"), "%d,%d", &clients, &total); err != nil {
		t.Fatal(err)
	}
	lat, wall := runLoad(t, url, clients, total)
	var sb strings.Builder
	fmt.Fprintf(&sb, "LOADGEN %d", wall.Nanoseconds())
	for _, d := range lat {
		fmt.Fprintf(&sb, " %d", d.Nanoseconds())
	}
	fmt.Println(sb.String())
}

// requestID finds "request_id":"…" in a reply.
func requestID(b []byte) string {
	const k = `"request_id":"`
	i := bytes.Index(b, []byte(k))
	if i < 0 {
		return ""
	}
	rest := b[i+len(k):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

func report(b *testing.B, lat []time.Duration, wall time.Duration) (opsPerSec float64, p50, p99 time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	opsPerSec = float64(len(lat)) / wall.Seconds()
	b.ReportMetric(opsPerSec, "ops/s")
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	return
}

func startNoop(b *testing.B, mode string, mut func(*config.Config)) *server.Server {
	dir := b.TempDir()
	cfg := config.Default(dir)
	cfg.Models = []config.Model{{Name: testenv.Model, Preset: "tiny", MaxLoraRank: 8, LoraAlphaRatio: 1}}
	cfg.Auth.APIKeys = []config.APIKey{{Tenant: "alice", KeySHA256: "a1f3b2c71cd2a1e8c6c6d39b4e6b3fbf7d9bb0c0dfdc2d3c1e8b5e9c1f4a7d20"}}
	cfg.Persistence.Mode = mode
	cfg.Persistence.Path = filepath.Join(dir, "tuft.db")
	cfg.CheckpointDir = filepath.Join(dir, "ck")
	cfg.Limits.MaxQueuedPerTenant = 1 << 20
	if mut != nil {
		mut(&cfg)
	}
	cfg.Auth.APIKeys[0].KeySHA256 = testenv.HashKey(testenv.KeyA)
	return testenv.StartWith(b, cfg, server.Options{Executor: testenv.NewNoopExecutor()})
}

// startTiny starts a server whose executor is the real engine with the tiny preset.
func startTiny(b *testing.B) *server.Server {
	dir := b.TempDir()
	cfg := config.Default(dir)
	cfg.Models = []config.Model{{Name: testenv.Model, Preset: "tiny", MaxLoraRank: 8, LoraAlphaRatio: 1}}
	cfg.Auth.APIKeys = []config.APIKey{{Tenant: "alice", KeySHA256: testenv.HashKey(testenv.KeyA)}}
	cfg.Persistence.Mode = "memory"
	cfg.CheckpointDir = filepath.Join(dir, "ck")
	cfg.Limits.MaxQueuedPerTenant = 1 << 20
	return testenv.StartWith(b, cfg, server.Options{})
}

// BenchmarkControlPlane prints ops/s, p50 and p99 of submit+retrieve of a trivial
// operation from concurrent clients (TUFT_BENCH_CLIENTS, default 12) over loopback, per
// store: each of TUFT_BENCH_ROUNDS rounds (default 3, b.N operations each) and their
// median, since a 2-core machine shared with the load generator is noisy.
func BenchmarkControlPlane(b *testing.B) {
	// As `tuft launch` does without telemetry: the disabled pipeline (no-op providers).
	tel, err := setup.New(context.Background(), telemetry.DefaultConfig(), "server", setup.WithLogLevel("error"))
	if err != nil {
		b.Fatal(err)
	}
	tel.InstallGlobal()
	defer tel.Shutdown(context.Background())
	for _, mode := range []string{"embedded", "redis", "memory"} {
		b.Run(mode, func(b *testing.B) {
			s := startNoop(b, mode, func(c *config.Config) {
				if mode == "redis" {
					c.Persistence.RedisURL = storetest.StartRedis(b)
				}
			})
			b.ResetTimer()
			var opsR, p50R, p99R []float64
			for r := 0; r < benchRounds(); r++ {
				lat, wall := loadInChild(b, s.URL(), benchClients(), max(b.N, 64))
				ops, p50, p99 := report(b, lat, wall)
				opsR, p50R, p99R = append(opsR, ops), append(p50R, ms(p50)), append(p99R, ms(p99))
				fmt.Fprintf(os.Stderr, "  round %d: %-8s %7.0f ops/s  p50 %6.2f ms  p99 %6.2f ms  (%d ops, %d clients)\n",
					r+1, mode, ops, ms(p50), ms(p99), len(lat), benchClients())
			}
			fmt.Fprintf(os.Stderr, "control plane %-8s %7.0f ops/s  p50 %6.2f ms  p99 %6.2f ms  (median of %d rounds)\n",
				mode, median(opsR), median(p50R), median(p99R), len(opsR))
		})
	}
}

func median(v []float64) float64 {
	v = append([]float64(nil), v...)
	sort.Float64s(v)
	return v[len(v)/2]
}

// benchRounds is TUFT_BENCH_ROUNDS, default 3.
func benchRounds() int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("TUFT_BENCH_ROUNDS"), &n); err == nil && n > 0 {
		return n
	}
	return 3
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkTelemetryOverhead compares control-plane throughput with telemetry disabled,
// (with TUFT_BENCH_FB_TOKENS=n the load is forward_backward of n tokens on the real tiny
// engine instead of optim_step on a no-op executor: the cost beside real model work)
// with sampling ratio 0, and fully on against a live collector (TUFT_BENCH_OTLP, e.g.
// http://127.0.0.1:4317 with deploy/otel/collector-bench.yaml; without it only the
// disabled mode runs). The modes alternate over TUFT_BENCH_ROUNDS rounds (default 3) and
// each mode's median is compared, so drifting load on the machine hits all modes alike.
func BenchmarkTelemetryOverhead(b *testing.B) {
	endpoint := os.Getenv("TUFT_BENCH_OTLP")
	modes := []struct {
		name string
		cfg  func(*telemetry.Config)
	}{
		{"disabled", func(c *telemetry.Config) { c.Enabled = false }},
		{"sampling0", func(c *telemetry.Config) { c.Enabled, c.SamplingRatio, c.OTLPEndpoint = true, 0, endpoint }},
		{"full", func(c *telemetry.Config) { c.Enabled, c.SamplingRatio, c.OTLPEndpoint = true, 1, endpoint }},
	}
	if endpoint == "" {
		modes = modes[:1]
		fmt.Fprintln(os.Stderr, "telemetry: set TUFT_BENCH_OTLP to a live collector to measure the enabled modes")
	}
	if only := os.Getenv("TUFT_BENCH_MODES"); only != "" { // e.g. "full", to profile one mode
		var keep = modes[:0:0]
		for _, m := range modes {
			if strings.Contains(","+only+",", ","+m.name+",") {
				keep = append(keep, m)
			}
		}
		modes = keep
	}
	rounds := benchRounds()
	ops := map[string][]float64{}
	p99s := map[string][]float64{}
	cpu := map[string][]float64{}     // the server process's CPU time per operation, µs
	colCPU := map[string][]float64{}  // the collector's (TUFT_BENCH_OTLP_PID), µs per operation
	loadCPU := map[string][]float64{} // the load generator's, µs per operation
	gcs := map[string][]float64{}     // the server's garbage collector's (runtime estimate), µs per operation
	dropped := map[string]int64{}
	for r := 0; r < rounds; r++ {
		// The order rotates from round to round, so no mode always runs first (or always
		// right after the garbage of the fully-on mode).
		for i := range modes {
			m := modes[(i+r)%len(modes)]
			runtime.GC()
			tc := telemetry.DefaultConfig()
			m.cfg(&tc)
			tel, err := setup.New(context.Background(), tc, "server", setup.WithLogLevel("error"))
			if err != nil {
				b.Fatal(err)
			}
			tel.InstallGlobal() // as tuft launch does
			var s *server.Server
			if forwardBackwardBody() != nil {
				s = startTiny(b)
			} else {
				s = startNoop(b, "memory", nil)
			}
			cpu0, col0, gc0 := processCPU(), collectorCPU(), gcCPU()
			lat, wall, genCPU := loadInChildCPU(b, s.URL(), benchClients(), max(b.N, 64))
			cpu[m.name] = append(cpu[m.name], float64((processCPU()-cpu0).Microseconds())/float64(len(lat)))
			gcs[m.name] = append(gcs[m.name], (gcCPU()-gc0)*1e6/float64(len(lat)))
			loadCPU[m.name] = append(loadCPU[m.name], float64(genCPU.Microseconds())/float64(len(lat)))
			colCPU[m.name] = append(colCPU[m.name], float64((collectorCPU()-col0).Microseconds())/float64(len(lat)))
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			ops[m.name] = append(ops[m.name], float64(len(lat))/wall.Seconds())
			p99s[m.name] = append(p99s[m.name], ms(lat[len(lat)*99/100]))
			s.Shutdown(context.Background())
			tel.Shutdown(context.Background())
			ds, _ := tel.Dropped()
			dropped[m.name] += ds
		}
	}
	base := math.NaN()
	if len(ops["disabled"]) > 0 {
		base = median(ops["disabled"])
	}
	for _, m := range modes {
		o := median(ops[m.name])
		// Each round runs every mode back to back, so the ratio within a round cancels the
		// machine's slow drift; the median of those paired ratios is the figure to quote.
		var paired []float64
		for r := range min(len(ops[m.name]), len(ops["disabled"])) {
			paired = append(paired, ops[m.name][r]/ops["disabled"][r])
		}
		if len(paired) > 0 {
			b.ReportMetric(median(paired), m.name+"-ratio")
		}
		b.ReportMetric(o, m.name+"-ops/s")
		col := ""
		if os.Getenv("TUFT_BENCH_OTLP_PID") != "" {
			col = fmt.Sprintf(", collector %.1f", median(colCPU[m.name]))
		}
		ratio := math.NaN()
		if len(paired) > 0 {
			ratio = median(paired)
		}
		var cpuPaired []float64 // the server's CPU per operation against disabled, per round
		for r := range min(len(cpu[m.name]), len(cpu["disabled"])) {
			cpuPaired = append(cpuPaired, cpu[m.name][r]/cpu["disabled"][r])
		}
		cpuRatio := math.NaN()
		if len(cpuPaired) > 0 {
			cpuRatio = median(cpuPaired)
		}
		fmt.Fprintf(os.Stderr, "telemetry %-9s %7.0f ops/s, %.3f of disabled (median of %d paired rounds; ratio of medians %.3f; rounds %v)  p99 %.2f ms  CPU µs/op: server %.1f (%.3f of disabled; GC %.1f), load generator %.1f%s  spans dropped %d\n",
			m.name, o, ratio, rounds, o/base, roundAll(ops[m.name]), median(p99s[m.name]), median(cpu[m.name]), cpuRatio, median(gcs[m.name]), median(loadCPU[m.name]), col, dropped[m.name])
	}
}

// processCPU is this process's user+system CPU time: the server's, since the load
// generator is a child process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// gcCPU is the runtime's estimate of the CPU seconds its garbage collector has used.
func gcCPU() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[0].Value.Float64()
}

// collectorCPU is the CPU time of the collector process named by TUFT_BENCH_OTLP_PID
// (0 without it): on a shared machine the collector's work competes with the server's.
func collectorCPU() time.Duration {
	pid := os.Getenv("TUFT_BENCH_OTLP_PID")
	if pid == "" {
		return 0
	}
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command: state is field 3, utime 14, stime 15, in
	// clock ticks (100 per second on Linux).
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

func roundAll(v []float64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x + 0.5)
	}
	return out
}

// benchClients is TUFT_BENCH_CLIENTS, default 12 concurrent clients.
func benchClients() int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("TUFT_BENCH_CLIENTS"), &n); err == nil && n > 0 {
		return n
	}
	return 12
}
