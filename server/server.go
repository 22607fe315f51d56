package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/api"
	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/console"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/registry"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/store/persistence"
	"github.com/tuft-go/tuft/telemetry"
)

// Server is a running control plane.
type Server struct {
	Cfg      config.Config
	Log      *slog.Logger
	Store    store.Store
	Futures  *futures.Manager
	Service  *service.Service
	Handler  *api.Handler
	Conns    *api.Conns
	Executor backend.Executor
	// Console is the web console at /console (nil when console.enabled is off).
	Console *console.Console

	http     *http.Server
	ln       net.Listener
	serveErr chan error
	once     sync.Once
	// stopWorkers ends worker discovery (nil without workers).
	stopWorkers context.CancelFunc
	// stopReplica withdraws this replica's registration (nil for a single server).
	stopReplica func()
	// sessionSpans is the session-span sink pointed at the service (nil when off).
	sessionSpans *telemetry.SpanSink
}

// Options adjust Start.
type Options struct {
	Logger *slog.Logger
	// Executor replaces the in-process model host (tests, remote workers).
	Executor backend.Executor
	// Listener replaces net.Listen on the configured host and port.
	Listener net.Listener
	// TracerProvider, MeterProvider and Instruments receive every component's spans and
	// measurements (default: the OTel global providers and telemetry.Metrics()).
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Instruments    *telemetry.Instruments
	// SessionSpans is the sink of the session-span processor on TracerProvider
	// (sessions.record_spans): Start points it at the service.
	SessionSpans *telemetry.SpanSink
}

// telemetry resolves the providers every component gets.
func (o Options) telemetry() telemetry.Settings {
	return telemetry.NewSettings(telemetry.WithTracerProvider(o.TracerProvider), telemetry.WithMeterProvider(o.MeterProvider),
		telemetry.WithInstruments(o.Instruments))
}

// EnsureAPIKey makes sure a config with no keys has one: the key in $TUFT_HOME/api_key,
// generated (tml- prefix, as the Tinker SDK requires) on first start. It returns the
// key when it was newly generated, so the caller can print it once.
func EnsureAPIKey(cfg *config.Config) (newKey string, err error) {
	if len(cfg.Auth.APIKeys) > 0 {
		return "", nil
	}
	path := filepath.Join(cfg.Home, "api_key")
	b, err := os.ReadFile(path)
	key := strings.TrimSpace(string(b))
	switch {
	case err == nil && key != "":
	case err == nil || errors.Is(err, os.ErrNotExist):
		if key, _, err = config.NewAPIKey(); err != nil {
			return "", err
		}
		if err := os.MkdirAll(cfg.Home, 0o700); err != nil {
			return "", fmt.Errorf("create TUFT_HOME: %w", err)
		}
		if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("write %s: %w", path, err)
		}
		newKey = key
	default:
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	cfg.Auth.APIKeys = []config.APIKey{{Tenant: "default", KeySHA256: config.HashAPIKey(key).String()}}
	return newKey, nil
}

// Start assembles and starts a server. It returns once the listener is open.
func Start(ctx context.Context, cfg config.Config, o Options) (*Server, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{Cfg: cfg, Log: log, serveErr: make(chan error, 1)}
	tel := o.telemetry()
	ok := false
	defer func() {
		if !ok {
			s.close(context.Background())
		}
	}()
	st, err := persistence.Open(ctx, cfg.Persistence, tel.Options()...)
	if err != nil {
		return nil, err
	}
	s.Store = st
	exec := o.Executor
	if exec == nil {
		models, infos, err := backend.LoadModels(cfg, log)
		if err != nil {
			return nil, err
		}
		local := backend.NewLocalWith(models, infos, backend.SchedConfigFrom(cfg.Engine.Scheduler), tel.Options()...)
		exec = local
		if remote := cfg.RemoteModels(); len(remote) > 0 {
			if exec, err = s.connectWorkers(ctx, cfg, local, len(models) > 0, remote, tel); err != nil {
				return nil, err
			}
		}
	}
	s.Executor = exec
	fo := futures.OptionsFrom(cfg)
	fo.Store, fo.Logger, fo.TracerProvider, fo.Instruments = st, log, tel.TracerProvider, tel.Instruments
	fut, err := futures.New(fo)
	if err != nil {
		return nil, err
	}
	s.Futures = fut
	svc, err := service.New(ctx, service.Options{Config: cfg, Store: st, Futures: fut, Backend: backend.New(exec, tel.Options()...), Logger: log,
		TracerProvider: tel.TracerProvider, Instruments: tel.Instruments, Encoder: api.ResultEncoder()})
	if err != nil {
		return nil, err
	}
	s.Service = svc
	if o.SessionSpans != nil && cfg.Sessions.RecordSpans {
		o.SessionSpans.Set(svc.RecordSessionSpan)
		s.sessionSpans = o.SessionSpans
	}
	ho := api.OptionsFrom(cfg)
	ho.Logger, ho.TracerProvider, ho.Instruments = log, tel.TracerProvider, tel.Instruments
	s.Handler = api.New(svc, ho)
	var root http.Handler = s.Handler
	if cfg.Console.Enabled {
		con, err := console.New(console.Options{API: s.Handler, Config: cfg.Console, PublicURL: cfg.Server.PublicURL, Logger: log,
			TracerProvider: tel.TracerProvider, Instruments: tel.Instruments})
		if err != nil {
			return nil, err
		}
		s.Console = con
		root = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if console.Handles(r.URL.Path) {
				con.ServeHTTP(w, r)
				return
			}
			s.Handler.ServeHTTP(w, r)
		})
	}
	ln := o.Listener
	if ln == nil {
		ln, err = net.Listen("tcp", net.JoinHostPort(cfg.Server.Host, fmt.Sprint(cfg.Server.Port)))
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
	}
	s.ln = ln
	if cfg.Server.PublicURL == "" {
		s.Handler.SetPublicURL("http://" + ln.Addr().String())
	}
	// Connection slots a keyless idle host cannot hold (api/conn.go).
	cl := api.ConnLimitsFrom(cfg.Server)
	cl.Instruments = tel.Instruments
	s.Conns = api.NewConns(cl)
	s.http = &http.Server{Handler: root,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeoutSeconds.Duration(), IdleTimeout: cfg.Server.IdleTimeoutSeconds.Duration(),
		ConnState: s.Conns.ConnState, ConnContext: s.Conns.ConnContext, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { s.serveErr <- s.http.Serve(ln) }()
	if cfg.Server.ReplicaID != "" {
		url := cfg.Server.ReplicaURL
		if url == "" {
			url = "http://" + ln.Addr().String()
		}
		rctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); svc.RegisterReplica(rctx, strings.TrimRight(url, "/")) }()
		s.stopReplica = func() { stop(); <-done }
	}
	ok = true
	return s, nil
}

// connectWorkers builds the router over the in-process models and the workers, and waits
// (workers.start_timeout_seconds) until every remote model has a worker.
func (s *Server) connectWorkers(ctx context.Context, cfg config.Config, local *backend.Local, hasLocal bool, remote []string,
	tel telemetry.Settings) (backend.Executor, error) {
	token, err := config.WorkerToken(cfg.Workers.TokenFile)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := cfg.Workers.ClientTLS()
	if err != nil {
		return nil, err
	}
	if token == "" && tlsCfg == nil {
		return nil, errors.New("workers: set workers.token_file (or TUFT_WORKER_TOKEN) or workers.tls: workers accept only an authenticated server")
	}
	router := backend.NewRouter()
	if hasLocal {
		router.Set(backend.LocalMember, local)
	}
	ro := backend.RemoteOptionsFrom(cfg.Workers)
	ro.Token, ro.TLS, ro.Telemetry = token, tlsCfg, tel.Options()
	do := backend.DirectoryOptions{Logger: s.Log, Remote: ro}
	for _, p := range cfg.Workers.Pinned {
		do.Pinned = append(do.Pinned, p.Address)
	}
	if cfg.Workers.Discover {
		do.Source = registry.NewWorkers(s.Store)
	}
	d := backend.NewDirectory(router, do)
	wctx, cancel := context.WithTimeout(ctx, cfg.Workers.StartTimeoutSeconds.Duration())
	defer cancel()
	if err := d.WaitFor(wctx, remote, time.Second); err != nil {
		router.Close()
		return nil, fmt.Errorf("workers: %w", err)
	}
	dctx, stop := context.WithCancel(context.Background())
	s.stopWorkers = stop
	go d.Run(dctx, cfg.Workers.CheckSeconds.Duration())
	return router, nil
}

// Addr is the listening address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the base URL of the API.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Done reports a failure of the HTTP server.
func (s *Server) Done() <-chan error { return s.serveErr }

// Shutdown stops accepting requests, ends long-polls, lets running operations finish
// (or fails them) within ctx, fails queued ones with a clear error, and flushes the store.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.once.Do(func() { err = s.close(ctx) })
	return err
}

func (s *Server) close(ctx context.Context) error {
	var errs []error
	if s.stopReplica != nil {
		s.stopReplica() // peers stop forwarding here first
	}
	if s.Handler != nil {
		s.Handler.BeginShutdown()
	}
	if s.http != nil {
		if err := s.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http: %w", err))
		}
	}
	if s.Futures != nil {
		if err := s.Futures.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("futures: %w", err))
		}
	}
	if s.sessionSpans != nil {
		s.sessionSpans.Set(nil) // spans ending from here on have no service to go to
	}
	if s.Service != nil {
		s.Service.Close()
	}
	if s.stopWorkers != nil {
		s.stopWorkers()
	}
	if s.Executor != nil {
		if err := s.Executor.Close(); err != nil {
			errs = append(errs, fmt.Errorf("executor: %w", err))
		}
	}
	if s.Store != nil {
		if err := s.Store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("store: %w", err))
		}
	}
	return errors.Join(errs...)
}
