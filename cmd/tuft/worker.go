package main

import (
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/tuft-go/tuft/internal/cli"
	"github.com/tuft-go/tuft/registry"
	"github.com/tuft-go/tuft/store/persistence"
	"github.com/tuft-go/tuft/worker"
)

// cmdWorker runs `tuft worker`: it hosts the config's models and serves them over gRPC
// (worker.Start); this function reads the flags and wires the process's telemetry and,
// with worker.register, the shared store the registration goes to.
func cmdWorker(args []string) error {
	fs := cli.NewFlags("worker", "tuft worker [--config FILE] [--listen ADDR] [--advertise ADDR] [--log-level LEVEL]",
		"Host the config's models for API replicas over gRPC.")
	cfgPath := fs.String("config", "", "worker config: models, worker, persistence, telemetry ($TUFT_CONFIG)")
	listen := fs.String("listen", "", "gRPC listen address (default worker.listen, 127.0.0.1:10620)")
	advertise := fs.String("advertise", "", "address API replicas dial, for the registration (default worker.advertise or the listen address)")
	logLevel := fs.String("log-level", "", "debug|info|warn|error")
	if err := fs.ParseArgs(args); err != nil {
		return err
	}
	if err := fs.CheckArgs(0, 0); err != nil {
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
	o := worker.Options{Logger: log, TracerProvider: tel.TracerProvider(), MeterProvider: tel.MeterProvider(), Version: version}
	if cfg.Worker.Register {
		st, err := persistence.Open(ctx, cfg.Persistence, tel.Options()...)
		if err != nil {
			return err
		}
		defer st.Close()
		o.Publisher = registry.NewWorkers(st)
	}
	w, err := worker.Start(ctx, cfg, o)
	if err != nil {
		return err
	}
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("worker shutting down: signal received")
	case serveErr = <-w.Done():
		log.Error("grpc server failed", "error", serveErr)
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeoutSeconds.Duration())
	defer cancel()
	if err := w.Shutdown(sctx); err != nil {
		log.Warn("worker shutdown", "error", err)
	}
	log.Info("worker shutdown complete")
	return serveErr
}
