package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/server"
	"github.com/tuft-go/tuft/telemetry/setup"
)

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

func cmdLaunch(args []string) error {
	fs := flag.NewFlagSet("launch", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "tuft_config.yaml (default $TUFT_CONFIG; none = embedded defaults)")
	host := fs.String("host", "", "listen host (default 127.0.0.1, $TUFT_HOST)")
	var port int
	fs.IntVar(&port, "port", 0, "listen port (default 10610, $TUFT_PORT)")
	fs.IntVar(&port, "p", 0, "shorthand for --port")
	logLevel := fs.String("log-level", "", "debug|info|warn|error ($TUFT_LOG_LEVEL)")
	ckptDir := fs.String("checkpoint-dir", "", "checkpoint directory ($TUFT_CHECKPOINT_DIR)")
	traceEnable := fs.Bool("trace-enable", false, "enable telemetry export (FastDeploy-style alias of telemetry.enabled)")
	tracesEndpoint := fs.String("otlp-traces-endpoint", "", "OTLP endpoint for telemetry (implies --trace-enable)")
	if err := fs.Parse(args); err != nil {
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
		TracerProvider: tel.TracerProvider(), MeterProvider: tel.MeterProvider(), Instruments: tel.Instruments()})
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
	sctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Server.ShutdownTimeoutSeconds*float64(time.Second)))
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

// startTelemetry sets up the process's telemetry with role and installs it as the
// process's globals (the OTel providers, slog's default logger); flush shuts it down,
// exporting what is buffered, under a 5 s deadline.
func startTelemetry(ctx context.Context, cfg config.Config, role string) (*setup.Telemetry, func(), error) {
	tel, err := setup.New(ctx, cfg.Telemetry, role, setup.WithLogLevel(cfg.Server.LogLevel), setup.WithVersion(version))
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

func cmdConfig(args []string) error {
	if len(args) != 2 || args[0] != "check" {
		return fmt.Errorf("usage: tuft config check FILE")
	}
	cfg, err := config.Load(args[1], config.DefaultHome())
	if err != nil {
		return err
	}
	fmt.Printf("%s: ok (%d model(s), persistence %s, telemetry enabled=%v)\n", args[1], len(cfg.Models), cfg.Persistence.Mode, cfg.Telemetry.Enabled)
	return nil
}

func cmdClear(args []string) error {
	if len(args) < 1 || args[0] != "persistence" {
		return fmt.Errorf("usage: tuft clear persistence [--config FILE] [-f]")
	}
	fs := flag.NewFlagSet("clear persistence", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "tuft_config.yaml ($TUFT_CONFIG)")
	force := fs.Bool("f", false, "do not ask for confirmation")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	where := cfg.Persistence.Mode
	switch cfg.Persistence.Mode {
	case "embedded":
		where = cfg.Persistence.Path
	case "redis":
		where = "namespace " + cfg.Persistence.Namespace + " on Redis"
	}
	if !*force {
		fmt.Printf("Delete every record in %s (checkpoint files are kept)? [y/N] ", where)
		var ans string
		fmt.Scanln(&ans)
		if a := strings.ToLower(strings.TrimSpace(ans)); a != "y" && a != "yes" {
			return fmt.Errorf("aborted")
		}
	}
	ctx := context.Background()
	st, err := server.OpenStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Clear(ctx); err != nil {
		return err
	}
	fmt.Println("cleared", where)
	return nil
}

func cmdKey(args []string) error {
	switch {
	case len(args) == 2 && args[0] == "hash":
		sum := sha256.Sum256([]byte(args[1]))
		fmt.Println(hex.EncodeToString(sum[:]))
		return nil
	case len(args) == 1 && args[0] == "new":
		raw := make([]byte, 24)
		if _, err := rand.Read(raw); err != nil {
			return err
		}
		key := "tml-" + hex.EncodeToString(raw)
		sum := sha256.Sum256([]byte(key))
		fmt.Printf("key:        %s\nkey_sha256: %s\n", key, hex.EncodeToString(sum[:]))
		return nil
	}
	return fmt.Errorf("usage: tuft key hash KEY | tuft key new")
}

var _ = slog.Default
