package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/internal/cli"
	"github.com/tuft-go/tuft/store/persistence"
)

// The administrative commands: config check, clear persistence and key.

func cmdConfig(args []string) error {
	_, args, err := verb(args, "check")
	if err != nil {
		return err
	}
	fs := cli.NewFlags("config check", "tuft config check FILE", "Validate a tuft_config.yaml: unknown keys, bad values, each named by its key.")
	if err := fs.ParseArgs(args); err != nil {
		return err
	}
	if err := fs.CheckArgs(1, 1); err != nil {
		return err
	}
	file := fs.Arg(0)
	cfg, err := config.Load(file, config.DefaultHome())
	if err != nil {
		return err
	}
	fmt.Printf("%s: ok (%d model(s), persistence %s, telemetry enabled=%v)\n", file, len(cfg.Models), cfg.Persistence.Mode, cfg.Telemetry.Enabled)
	return nil
}

func cmdClear(args []string) error {
	_, args, err := verb(args, "persistence")
	if err != nil {
		return err
	}
	fs := cli.NewFlags("clear persistence", "tuft clear persistence [--config FILE] [-f]",
		"Delete every stored record (sessions, runs, futures); checkpoint files are kept.")
	cfgPath := fs.String("config", "", "tuft_config.yaml ($TUFT_CONFIG)")
	force := fs.Bool("f", false, "do not ask for confirmation")
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
	st, err := persistence.Open(ctx, cfg.Persistence)
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
	sub, args, err := verb(args, "hash", "new")
	if err != nil {
		return err
	}
	if sub == "hash" {
		fs := cli.NewFlags("key hash", "tuft key hash KEY", "Print the key_sha256 of KEY, for auth.api_keys.")
		if err := fs.ParseArgs(args); err != nil {
			return err
		}
		if err := fs.CheckArgs(1, 1); err != nil {
			return err
		}
		fmt.Println(config.HashAPIKey(fs.Arg(0)))
		return nil
	}
	fs := cli.NewFlags("key new", "tuft key new", "Generate an API key (tml- prefix) and print it with its key_sha256.")
	if err := fs.ParseArgs(args); err != nil {
		return err
	}
	if err := fs.CheckArgs(0, 0); err != nil {
		return err
	}
	key, sum, err := config.NewAPIKey()
	if err != nil {
		return err
	}
	fmt.Printf("key:        %s\nkey_sha256: %s\n", key, sum)
	return nil
}
