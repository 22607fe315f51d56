package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/telemetry"
)

// Publisher makes a worker findable by the API replicas: it publishes reg, renews it
// every interval until ctx ends, then withdraws it (registry.Workers over the shared
// store). A failed write goes to onErr and is retried.
type Publisher interface {
	Publish(ctx context.Context, reg backend.Registration, every time.Duration, onErr func(error))
}

// Options adjust Start.
type Options struct {
	Logger *slog.Logger
	// Executor replaces the models of the config (tests).
	Executor backend.Executor
	// Listener replaces net.Listen on worker.listen.
	Listener net.Listener
	// Publisher receives the registration when worker.register is set (required then).
	Publisher Publisher
	// TracerProvider and MeterProvider receive the gRPC server's and the models' spans
	// and metrics (default: the OTel globals).
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Version goes into the start-up log line.
	Version string
}

// Worker is a running `tuft worker` process.
type Worker struct {
	cfg     config.Config
	log     *slog.Logger
	svc     *Service
	exec    backend.Executor
	grpc    *grpc.Server
	health  *health.Server
	ln      net.Listener
	addr    string // advertised
	served  chan error
	stopReg context.CancelFunc // nil without registration
	regDone chan struct{}      // closed when the registration is withdrawn
	once    sync.Once
	err     error
}

// Start assembles a worker from cfg: it loads the config's models (none may be remote),
// serves them over gRPC on worker.listen with the token or mutual TLS of worker.*, marks
// itself healthy, and publishes its registration when worker.register is set. It
// returns once the listener is open.
func Start(ctx context.Context, cfg config.Config, o Options) (*Worker, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	tel := []telemetry.Option{telemetry.WithTracerProvider(o.TracerProvider), telemetry.WithMeterProvider(o.MeterProvider)}
	if cfg.Worker.Register && o.Publisher == nil {
		return nil, errors.New("worker.register is set but no publisher was given (persistence must be a shared store)")
	}
	token, err := config.WorkerToken(cfg.Worker.TokenFile)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := cfg.Worker.ServerTLS()
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, log: o.Logger, exec: o.Executor, served: make(chan error, 1)}
	ok := false
	defer func() {
		if !ok {
			_ = w.close(context.Background())
		}
	}()
	if w.exec == nil {
		for i, m := range cfg.Models {
			if m.Remote {
				return nil, fmt.Errorf("models[%d] (%s) is remote: a worker hosts models from a path or preset", i, m.Name)
			}
		}
		models, infos, err := backend.LoadModels(cfg, w.log)
		if err != nil {
			return nil, err
		}
		w.exec = backend.NewLocalWith(models, infos, backend.SchedConfigFrom(cfg.Engine.Scheduler), tel...)
	}
	w.svc = NewService(w.exec)
	w.grpc, w.health, err = NewServer(w.svc, ServerOptions{Token: token, TLS: tlsCfg, Telemetry: tel})
	if err != nil {
		return nil, err
	}
	w.ln = o.Listener
	if w.ln == nil {
		if w.ln, err = net.Listen("tcp", cfg.Worker.Listen); err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
	}
	go func() { w.served <- w.grpc.Serve(w.ln) }()
	w.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)

	w.addr = cfg.Worker.Advertise
	if w.addr == "" {
		w.addr = w.ln.Addr().String()
	}
	var names []string
	for _, m := range w.exec.Models() {
		names = append(names, m.Name)
	}
	if cfg.Worker.Register {
		reg := backend.Registration{Address: w.addr, Instance: w.svc.Instance(), Models: names, Started: time.Now().UTC()}
		every := cfg.Worker.HeartbeatSeconds.Duration()
		rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		w.stopReg, w.regDone = stop, make(chan struct{})
		go func() {
			defer close(w.regDone)
			o.Publisher.Publish(rctx, reg, every, func(err error) {
				w.log.Warn("worker registration failed; retrying", "address", reg.Address, "error", err)
			})
		}()
	}
	w.log.Info("tuft worker is serving", "listen", w.ln.Addr().String(), "advertise", w.addr, "models", strings.Join(names, ","),
		"instance", w.svc.Instance(), "tls", tlsCfg != nil, "registered", cfg.Worker.Register, "version", o.Version)
	ok = true
	return w, nil
}

// Addr is the gRPC listening address.
func (w *Worker) Addr() string { return w.ln.Addr().String() }

// Instance identifies this worker process (it changes on every start).
func (w *Worker) Instance() string { return w.svc.Instance() }

// Done reports a failure of the gRPC server.
func (w *Worker) Done() <-chan error { return w.served }

// Shutdown withdraws the registration and the health status first, so replicas stop
// choosing this worker, then lets running calls finish within ctx (and stops the rest),
// and releases the models.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.once.Do(func() { w.err = w.close(ctx) })
	return w.err
}

func (w *Worker) close(ctx context.Context) error {
	if w.health != nil {
		w.health.Shutdown()
	}
	if w.stopReg != nil {
		w.stopReg()
		<-w.regDone
	}
	var errs []error
	if w.grpc != nil {
		done := make(chan struct{})
		go func() { w.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			w.log.Warn("worker shutdown: running operations did not finish in time; stopping")
			w.grpc.Stop()
			<-done
			errs = append(errs, fmt.Errorf("grpc: %w", ctx.Err()))
		}
	} else if w.ln != nil {
		w.ln.Close()
	}
	if w.exec != nil {
		if err := w.exec.Close(); err != nil {
			errs = append(errs, fmt.Errorf("executor: %w", err))
		}
	}
	return errors.Join(errs...)
}
