package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/tuft-go/tuft/engine"
)

func cmdModel(args []string) error {
	if len(args) >= 1 && args[0] == "presets" {
		fmt.Println(strings.Join(engine.Presets(), "\n"))
		return nil
	}
	if len(args) < 1 || args[0] != "init" {
		return fmt.Errorf("usage: tuft model init --preset NAME --out DIR | tuft model presets")
	}
	fs := flag.NewFlagSet("model init", flag.ContinueOnError)
	preset := fs.String("preset", "tiny", "preset name ("+strings.Join(engine.Presets(), ", ")+")")
	out := fs.String("out", "", "output directory (HuggingFace layout)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	if err := engine.WritePreset(*preset, *out); err != nil {
		return err
	}
	fmt.Printf("wrote preset %s to %s\n", *preset, *out)
	return nil
}
