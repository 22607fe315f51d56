package main

import (
	"fmt"
	"strings"

	"github.com/tuft-go/tuft/engine"
)

func cmdModel(args []string) error {
	sub, args, err := verb(args, "init", "presets")
	if err != nil {
		return err
	}
	if sub == "presets" {
		fs := newFlags("model presets", "tuft model presets", "List the built-in model presets.")
		if err := fs.parse(args); err != nil {
			return err
		}
		if err := fs.args(0, 0); err != nil {
			return err
		}
		fmt.Println(strings.Join(engine.Presets(), "\n"))
		return nil
	}
	fs := newFlags("model init", "tuft model init --preset NAME --out DIR",
		"Write a built-in model (deterministic weights, tokenizer, config) in HuggingFace layout.")
	preset := fs.String("preset", "tiny", "preset name ("+strings.Join(engine.Presets(), ", ")+")")
	out := fs.String("out", "", "output directory (HuggingFace layout)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := fs.args(0, 0); err != nil {
		return err
	}
	if *out == "" {
		return &usageError{err: fmt.Errorf("--out is required"), usage: fs.usage()}
	}
	if err := engine.WritePreset(*preset, *out); err != nil {
		return err
	}
	fmt.Printf("wrote preset %s to %s\n", *preset, *out)
	return nil
}
