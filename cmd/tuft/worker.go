package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/server"
	"github.com/tuft-go/tuft/worker"
)

// cmdWorker runs `tuft worker`: it hosts the config's models and serves them over gRPC.
func cmdWorker(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "worker config: models, worker, persistence, telemetry ($TUFT_CONFIG)")
	listen := fs.String("listen", "", "gRPC listen address (default worker.listen, 127.0.0.1:10620)")
	advertise := fs.String("advertise", "", "address API replicas dial, for the registration (default worker.advertise or the listen address)")
	logLevel := fs.String("log-level", "", "debug|info|warn|error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Worker.Listen = *listen
	}
	if *advertise != "" {
		cfg.Worker.Advertise = *advertise
	}
	if *logLevel != "" {
		cfg.Server.LogLevel = strings.ToLower(*logLevel)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	for i, m := range cfg.Models {
		if m.Remote {
			return fmt.Errorf("models[%d] (%s) is remote: a worker hosts models from a path or preset", i, m.Name)
		}
	}
	token, err := config.WorkerToken(cfg.Worker.TokenFile)
	if err != nil {
		return err
	}
	tlsCfg, err := worker.ServerTLS(cfg.Worker.TLS)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The worker exports its own spans, metrics and logs (tuft.role=worker) and flushes
	// them on exit: the Python TuFT's Ray actors never start exporters, so their spans
	// are lost.
	tel, flush, err := startTelemetry(ctx, cfg, "worker")
	if err != nil {
		return err
	}
	defer flush()
	log := tel.Logger()

	models, infos, err := server.LoadModels(cfg, log)
	if err != nil {
		return err
	}
	local := backend.NewLocal(models, infos)
	defer local.Close()
	svc := worker.NewService(local)
	srv, health, err := worker.NewServer(svc, worker.Options{Token: token, TLS: tlsCfg})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Worker.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)

	addr := cfg.Worker.Advertise
	if addr == "" {
		addr = ln.Addr().String()
	}
	var names []string
	for _, m := range infos {
		names = append(names, m.Name)
	}
	regDone := make(chan struct{})
	rctx, unregister := context.WithCancel(context.Background())
	defer unregister()
	if cfg.Worker.Register {
		st, err := server.OpenStore(ctx, cfg)
		if err != nil {
			srv.Stop()
			return err
		}
		defer st.Close()
		reg := worker.Registration{Address: addr, Instance: svc.Instance(), Models: names, Started: time.Now().UTC()}
		go func() {
			defer close(regDone)
			worker.Register(rctx, st, reg, time.Duration(cfg.Worker.HeartbeatSeconds*float64(time.Second)), log)
		}()
	} else {
		close(regDone)
	}
	log.Info("tuft worker is serving", "listen", ln.Addr().String(), "advertise", addr, "models", strings.Join(names, ","),
		"instance", svc.Instance(), "tls", tlsCfg != nil, "registered", cfg.Worker.Register, "version", version)

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("worker shutting down: signal received")
	case serveErr = <-served:
		log.Error("grpc server failed", "error", serveErr)
	}
	// Withdraw first so replicas stop choosing this worker, then finish running calls.
	health.Shutdown()
	unregister()
	<-regDone
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Duration(cfg.Server.ShutdownTimeoutSeconds * float64(time.Second))):
		log.Warn("worker shutdown: running operations did not finish in time; stopping")
		srv.Stop()
	}
	log.Info("worker shutdown complete")
	return serveErr
}
