package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/tuft-go/tuft/client"
	"github.com/tuft-go/tuft/config"
)

// restFlags adds --url and --api-key and returns a constructor for the REST client.
func restFlags(fs *flag.FlagSet) func() (*client.RestClient, error) {
	url := fs.String("url", "", "server URL ($TUFT_URL, default http://127.0.0.1:10610)")
	key := fs.String("api-key", "", "API key ($TUFT_API_KEY, else $TUFT_HOME/api_key)")
	return func() (*client.RestClient, error) {
		u := *url
		if u == "" {
			u = os.Getenv("TUFT_URL")
		}
		if u == "" {
			u = "http://127.0.0.1:10610"
		}
		k := *key
		if k == "" {
			k = os.Getenv("TUFT_API_KEY")
		}
		if k == "" {
			b, err := os.ReadFile(filepath.Join(config.DefaultHome(), "api_key"))
			if err != nil {
				return nil, fmt.Errorf("no API key: pass --api-key, set TUFT_API_KEY, or run `tuft launch` once")
			}
			k = strings.TrimSpace(string(b))
		}
		return client.NewRestClient(u, k)
	}
}

func cmdRuns(args []string) error {
	if len(args) < 1 || (args[0] != "list" && args[0] != "show") {
		return fmt.Errorf("usage: tuft runs list | tuft runs show RUN_ID")
	}
	fs := flag.NewFlagSet("runs", flag.ContinueOnError)
	mk := restFlags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	rc, err := mk()
	if err != nil {
		return err
	}
	ctx := context.Background()
	if args[0] == "show" {
		if fs.NArg() != 1 {
			return fmt.Errorf("usage: tuft runs show RUN_ID")
		}
		r, err := rc.GetTrainingRun(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		fmt.Printf("run:           %s\nbase model:    %s\nowner:         %s\nlora rank:     %d\ncorrupted:     %v\nlast request:  %s\n",
			r.TrainingRunID, r.BaseModel, r.ModelOwner, deref(r.LoraRank), r.Corrupted, r.LastRequestTime.Format(time.RFC3339))
		if r.LastCheckpoint != nil {
			fmt.Printf("last state:    %s\n", r.LastCheckpoint.TinkerPath)
		}
		if r.LastSamplerCheckpoint != nil {
			fmt.Printf("last sampler:  %s\n", r.LastSamplerCheckpoint.TinkerPath)
		}
		cks, err := rc.ListCheckpoints(ctx, r.TrainingRunID)
		if err != nil {
			return err
		}
		fmt.Printf("checkpoints:   %d\n", len(cks))
		return nil
	}
	runs, err := rc.ListTrainingRuns(ctx, 1000, 0)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RUN\tBASE MODEL\tRANK\tLAST REQUEST\tLAST CHECKPOINT")
	for _, r := range runs.TrainingRuns {
		last := "-"
		if r.LastCheckpoint != nil {
			last = r.LastCheckpoint.CheckpointID
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", r.TrainingRunID, r.BaseModel, deref(r.LoraRank), r.LastRequestTime.Format(time.RFC3339), last)
	}
	return w.Flush()
}

func deref[T any](p *T) T {
	var z T
	if p != nil {
		return *p
	}
	return z
}

func cmdCheckpoints(args []string) error {
	usage := fmt.Errorf("usage: tuft checkpoints list [RUN_ID] | download PATH [-o FILE] | delete PATH | publish PATH | unpublish PATH")
	if len(args) < 1 {
		return usage
	}
	fs := flag.NewFlagSet("checkpoints", flag.ContinueOnError)
	mk := restFlags(fs)
	outPath := fs.String("o", "", "download: output file (default <run>_<name>.tar)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	rc, err := mk()
	if err != nil {
		return err
	}
	ctx := context.Background()
	switch args[0] {
	case "list":
		cks, err := rc.ListCheckpoints(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "PATH\tTYPE\tSIZE\tPUBLIC\tCREATED\tEXPIRES")
		for _, c := range cks {
			exp := "-"
			if c.ExpiresAt != nil {
				exp = c.ExpiresAt.Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%v\t%s\t%s\n", c.TinkerPath, c.CheckpointType, deref(c.SizeBytes), c.Public, c.Time.Format(time.RFC3339), exp)
		}
		return w.Flush()
	case "download":
		if fs.NArg() != 1 {
			return usage
		}
		path := fs.Arg(0)
		out := *outPath
		if out == "" {
			out = strings.NewReplacer("tinker://", "", "/", "_", ":", "_").Replace(path) + ".tar"
		}
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		var bar *progressbar.ProgressBar
		n, err := rc.Download(ctx, path, f, func(done, total int64) {
			if bar == nil {
				bar = progressbar.DefaultBytes(total, "downloading")
			}
			_ = bar.Set64(done)
		})
		if bar != nil {
			_ = bar.Finish()
		}
		if err != nil {
			os.Remove(out)
			return err
		}
		fmt.Printf("\nwrote %s (%d bytes): a tar of the PEFT adapter\n", out, n)
		return nil
	case "delete", "publish", "unpublish":
		if fs.NArg() != 1 {
			return usage
		}
		var err error
		switch args[0] {
		case "delete":
			err = rc.DeleteCheckpoint(ctx, fs.Arg(0))
		case "publish":
			err = rc.Publish(ctx, fs.Arg(0))
		default:
			err = rc.Unpublish(ctx, fs.Arg(0))
		}
		if err != nil {
			return err
		}
		fmt.Printf("%sd %s\n", strings.TrimSuffix(args[0], "e"), fs.Arg(0))
		return nil
	}
	return usage
}
