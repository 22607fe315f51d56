package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/telemetry"
	"github.com/tuft-go/tuft/telemetry/setup"
)

// What the two process commands, launch and worker, share: the config and telemetry.

// loadConfig resolves --config / TUFT_CONFIG and TUFT_HOME into a validated config.
func loadConfig(path string) (config.Config, error) {
	home := config.DefaultHome()
	if path == "" {
		path = os.Getenv("TUFT_CONFIG")
	}
	var cfg config.Config
	var err error
	if path == "" {
		cfg, err = config.Parse(nil, home)
	} else {
		cfg, err = config.Load(path, home)
	}
	if err != nil {
		return cfg, err
	}
	if err := cfg.ApplyEnv(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// startTelemetry sets up the process's telemetry with role and installs it as the
// process's globals (the OTel providers, slog's default logger); flush shuts it down,
// exporting what is buffered, under a 5 s deadline.
func startTelemetry(ctx context.Context, cfg config.Config, role string) (*setup.Telemetry, func(), error) {
	opts := []setup.Option{setup.WithLogLevel(cfg.Server.LogLevel), setup.WithVersion(version)}
	if role == "server" && cfg.Sessions.RecordSpans {
		opts = append(opts, setup.WithSessionSpans(&telemetry.SpanSink{}))
	}
	tel, err := setup.New(ctx, cfg.Telemetry, role, opts...)
	if err != nil {
		return nil, nil, err
	}
	tel.InstallGlobal()
	return tel, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			fmt.Fprintln(os.Stderr, "telemetry shutdown:", err)
		}
	}, nil
}
