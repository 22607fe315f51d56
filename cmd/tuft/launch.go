package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/tuft-go/tuft/internal/cli"
	"github.com/tuft-go/tuft/server"
)

func cmdLaunch(args []string) error {
	fs := cli.NewFlags("launch", "tuft launch [--config FILE] [--host HOST] [--port PORT] [flags]",
		"Run the API server: embedded defaults (built-in model, embedded store, API on 127.0.0.1:10610) without a config.")
	cfgPath := fs.String("config", "", "tuft_config.yaml (default $TUFT_CONFIG; none = embedded defaults)")
	host := fs.String("host", "", "listen host (default 127.0.0.1, $TUFT_HOST)")
	var port int
	fs.IntVar(&port, "port", 0, "listen port (default 10610, $TUFT_PORT)")
	fs.IntVar(&port, "p", 0, "shorthand for --port")
	logLevel := fs.String("log-level", "", "debug|info|warn|error ($TUFT_LOG_LEVEL)")
	ckptDir := fs.String("checkpoint-dir", "", "checkpoint directory ($TUFT_CHECKPOINT_DIR)")
	traceEnable := fs.Bool("trace-enable", false, "enable telemetry export (FastDeploy-style alias of telemetry.enabled)")
	tracesEndpoint := fs.String("otlp-traces-endpoint", "", "OTLP endpoint for telemetry (implies --trace-enable)")
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
	if *host != "" {
		cfg.Server.Host = *host
	}
	if port != 0 {
		cfg.Server.Port = port
	}
	if *logLevel != "" {
		cfg.Server.LogLevel = strings.ToLower(*logLevel)
	}
	if *ckptDir != "" {
		cfg.CheckpointDir = *ckptDir
	}
	if *traceEnable || *tracesEndpoint != "" {
		cfg.Telemetry.Enabled = true
	}
	if *tracesEndpoint != "" {
		cfg.Telemetry.OTLPEndpoint = *tracesEndpoint
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	newKey, err := server.EnsureAPIKey(&cfg)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tel, flush, err := startTelemetry(ctx, cfg, "server")
	if err != nil {
		return err
	}
	defer flush()
	log := tel.Logger()
	if newKey != "" {
		fmt.Fprintf(os.Stderr, "\nGenerated an API key (shown once; also saved in %s/api_key, mode 0600):\n\n    %s\n\n"+
			"Use it with the Tinker SDK:  export TINKER_API_KEY=%s TINKER_BASE_URL=http://%s:%d\n\n",
			cfg.Home, newKey, newKey, cfg.Server.Host, cfg.Server.Port)
	}
	srv, err := server.Start(ctx, cfg, server.Options{Logger: log,
		TracerProvider: tel.TracerProvider(), MeterProvider: tel.MeterProvider(), Instruments: tel.Instruments(),
		SessionSpans: tel.SessionSpans()})
	if err != nil {
		return err
	}
	var names []string
	for _, m := range cfg.Models {
		names = append(names, m.Name)
	}
	log.Info("tuft is serving", "url", srv.URL(), "models", strings.Join(names, ","), "store", cfg.Persistence.Mode,
		"checkpoint_dir", cfg.CheckpointDir, "telemetry", cfg.Telemetry.Enabled, "version", version)
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down: signal received")
	case serveErr = <-srv.Done():
		log.Error("http server failed", "error", serveErr)
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeoutSeconds.Duration())
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error("shutdown", "error", err)
		return err
	}
	log.Info("shutdown complete")
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}
