package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/client"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/server"
)

// This file must keep compiling against older commits: scripts/bench-compare.sh copies it
// into a worktree of the commit it compares against. So it uses only the Go client
// (package client), config and server.Start — the public surface — and nothing of
// internal/testenv or of the packages behind the API.

// model is the base model the benchmark's server hosts (the tiny preset).
const model = "bench/tiny"

// mix is the shape of one control-plane run: tenants × sessions clients, each doing
// steps training steps on its own run.
type mix struct {
	tenants, sessions, steps int
	store                    string // persistence.mode: memory, embedded
}

// envInt is the environment variable name as a positive integer, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// mixFromEnv is the benchmark's shape: TUFT_BENCH_TENANTS (default 4) tenants with
// TUFT_BENCH_SESSIONS (default 2) sessions each, persistence TUFT_BENCH_STORE (default
// embedded, the single-node deployment's store); steps comes from b.N.
func mixFromEnv(steps int) mix {
	st := os.Getenv("TUFT_BENCH_STORE")
	if st == "" {
		st = "embedded"
	}
	return mix{tenants: envInt("TUFT_BENCH_TENANTS", 4), sessions: envInt("TUFT_BENCH_SESSIONS", 2), steps: steps, store: st}
}

// startServer starts a server with the tiny preset and one API key per tenant; it is
// shut down when tb ends. It returns the URL and the keys.
func startServer(tb testing.TB, m mix) (string, []string) {
	tb.Helper()
	dir := tb.TempDir()
	cfg := config.Default(dir)
	cfg.Models = []config.Model{{Name: model, Preset: "tiny", MaxLoraRank: 8, LoraAlphaRatio: 1}}
	keys := make([]string, m.tenants)
	cfg.Auth.APIKeys = nil
	for i := range keys {
		keys[i] = fmt.Sprintf("tml-bench-key-tenant-%02d-0123456789", i)
		cfg.Auth.APIKeys = append(cfg.Auth.APIKeys, config.APIKey{Tenant: fmt.Sprintf("tenant%02d", i), KeySHA256: config.HashAPIKey(keys[i]).String()})
	}
	cfg.Persistence.Mode = m.store
	cfg.Persistence.Path = filepath.Join(dir, "tuft.db")
	cfg.CheckpointDir = filepath.Join(dir, "checkpoints")
	cfg.Server.Port = 0
	if err := cfg.Validate(); err != nil {
		tb.Fatalf("config: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s, err := server.Start(context.Background(), cfg, server.Options{Listener: ln,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatalf("start server: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s.URL(), keys
}

// latencies collects each operation kind's latencies from concurrent sessions.
type latencies struct {
	mu sync.Mutex
	by map[string][]time.Duration
}

// time runs f and records its latency under kind; f's error is returned.
func (l *latencies) time(kind string, f func() error) error {
	t0 := time.Now()
	err := f()
	d := time.Since(t0)
	if err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	l.mu.Lock()
	l.by[kind] = append(l.by[kind], d)
	l.mu.Unlock()
	return nil
}

// opKinds are the recorded kinds in report order. An asynchronous operation's latency is
// submit to result; retrieve_future is the result's long poll alone (every one of them).
var opKinds = []string{"create_model", "forward_backward", "optim_step", "retrieve_future", "save_weights",
	"create_sampling_session", "sample", "list_runs", "list_checkpoints"}

// datum is a cross-entropy example of n tokens from start.
func datum(start, n int) wire.Datum {
	toks := make([]int32, n)
	tgt := make([]int64, n)
	w := make([]float32, n)
	for i := range toks {
		toks[i], tgt[i], w[i] = int32(start+i), int64(start+i+1), 1
	}
	return wire.Datum{Tokens: toks, LossInputs: map[string]wire.Tensor{
		"target_tokens": {DType: wire.Int64, Shape: []int{n}, I64: tgt}, "weights": {DType: wire.Float32, Shape: []int{n}, F32: w}}}
}

// result waits for f, recording the wait as retrieve_future.
func result[T any](ctx context.Context, l *latencies, f *client.Future[T]) (T, error) {
	var v T
	err := l.time("retrieve_future", func() (err error) { v, err = f.Result(ctx); return err })
	return v, err
}

// session is one client's work: create a run, save it for sampling, then steps × (a
// forward_backward of 8 tokens, an optim_step, a sample of 1 to 4 tokens, a list of the
// tenant's runs), with a save_weights and a list of the run's checkpoints every 4 steps.
func session(ctx context.Context, url, key string, id, steps int, l *latencies) error {
	sc, err := client.NewServiceClient(ctx, url, key)
	if err != nil {
		return fmt.Errorf("create_session: %w", err)
	}
	defer sc.Close()
	var tc *client.TrainingClient
	if err := l.time("create_model", func() (err error) {
		tc, err = sc.CreateLoRATrainingClient(ctx, model, client.DefaultLora(4))
		return err
	}); err != nil {
		return err
	}
	save := func(name string) (string, error) {
		var path string
		err := l.time("save_weights", func() error {
			f, err := tc.SaveWeightsForSampler(ctx, name)
			if err == nil {
				path, err = result(ctx, l, f)
			}
			return err
		})
		return path, err
	}
	path, err := save("s0")
	if err != nil {
		return err
	}
	var smp *client.SamplingClient
	if err := l.time("create_sampling_session", func() (err error) {
		smp, err = sc.CreateSamplingClient(ctx, path, "")
		return err
	}); err != nil {
		return err
	}
	data := []wire.Datum{datum(10+id%40, 8)}
	adam := wire.AdamParams{LearningRate: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
	rest := sc.REST()
	for i := 0; i < steps; i++ {
		if err := l.time("forward_backward", func() error {
			f, err := tc.ForwardBackward(ctx, data, "cross_entropy", nil)
			if err == nil {
				_, err = result(ctx, l, f)
			}
			return err
		}); err != nil {
			return err
		}
		if err := l.time("optim_step", func() error {
			f, err := tc.OptimStep(ctx, adam)
			if err == nil {
				_, err = result(ctx, l, f)
			}
			return err
		}); err != nil {
			return err
		}
		seed := int64(i)
		p := client.DefaultSampling(1 + (id+i)%4)
		p.Seed = &seed
		if err := l.time("sample", func() error {
			f, err := smp.Sample(ctx, []int32{20, 21, 22}, 1, p)
			if err == nil {
				var r wire.SampleResponse
				if r, err = result(ctx, l, f); err == nil && len(r.Sequences) != 1 {
					err = fmt.Errorf("%d sequences, want 1", len(r.Sequences))
				}
			}
			return err
		}); err != nil {
			return err
		}
		if err := l.time("list_runs", func() error {
			_, err := rest.ListTrainingRuns(ctx, 20, 0)
			return err
		}); err != nil {
			return err
		}
		if i%4 == 3 {
			if _, err := save(fmt.Sprintf("s%d", i+1)); err != nil {
				return err
			}
			if err := l.time("list_checkpoints", func() error {
				_, err := rest.ListCheckpoints(ctx, tc.ModelID)
				return err
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// runMix starts a server and runs m's sessions concurrently; it returns each kind's
// latencies and the wall time of the sessions (server start excluded).
func runMix(tb testing.TB, m mix) (map[string][]time.Duration, time.Duration) {
	url, keys := startServer(tb, m)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := &latencies{by: map[string][]time.Duration{}}
	errs := make(chan error, m.tenants*m.sessions)
	var wg sync.WaitGroup
	t0 := time.Now()
	for t := 0; t < m.tenants; t++ {
		for s := 0; s < m.sessions; s++ {
			wg.Add(1)
			go func(key string, id int) {
				defer wg.Done()
				if err := session(ctx, url, key, id, m.steps, l); err != nil {
					errs <- fmt.Errorf("session %d: %w", id, err)
				}
			}(keys[t], t*m.sessions+s)
		}
	}
	wg.Wait()
	wall := time.Since(t0)
	close(errs)
	for err := range errs {
		tb.Error(err)
	}
	return l.by, wall
}

// quantile is the q-quantile of sorted d.
func quantile(d []time.Duration, q float64) time.Duration {
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkControlPlaneMix is TUFT_BENCH_TENANTS × TUFT_BENCH_SESSIONS concurrent Go
// clients on one server with the real tiny engine, each doing b.N steps (run it with
// -benchtime=Nx: the work is N steps per session, not a timed loop). It reports, per
// operation kind, ops/s over the whole run's wall time and p50/p99 latency in ms, and
// the total ops/s. scripts/bench-compare.sh runs it against two commits.
func BenchmarkControlPlaneMix(b *testing.B) {
	m := mixFromEnv(b.N)
	b.ResetTimer()
	by, wall := runMix(b, m)
	b.StopTimer()
	total := 0
	var sb strings.Builder
	fmt.Fprintf(&sb, "control-plane mix: %d tenants × %d sessions × %d steps, store %s, %.2fs\n", m.tenants, m.sessions, m.steps, m.store, wall.Seconds())
	for _, k := range opKinds {
		d := by[k]
		if len(d) == 0 {
			continue
		}
		total += len(d)
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		ops := float64(len(d)) / wall.Seconds()
		b.ReportMetric(ops, k+"-ops/s")
		b.ReportMetric(ms(quantile(d, 0.5)), k+"-p50-ms")
		b.ReportMetric(ms(quantile(d, 0.99)), k+"-p99-ms")
		fmt.Fprintf(&sb, "  %-24s %6d ops %8.1f ops/s  p50 %8.2f ms  p99 %8.2f ms\n", k, len(d), ops, ms(quantile(d, 0.5)), ms(quantile(d, 0.99)))
	}
	// retrieve_future is part of the asynchronous operations' latencies: the total counts
	// requests the clients made, so it is included once as its own kind.
	b.ReportMetric(float64(total)/wall.Seconds(), "total-ops/s")
	if testing.Verbose() {
		fmt.Fprint(os.Stderr, sb.String())
	}
}
