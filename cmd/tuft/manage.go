package main

import (
	"context"
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
func restFlags(fs *flags) func() (*client.RestClient, error) {
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
	sub, args, err := verb(args, "list", "show")
	if err != nil {
		return err
	}
	fs := newFlags("runs list", "tuft runs list [--url URL] [--api-key KEY]", "List the tenant's training runs.")
	if sub == "show" {
		fs = newFlags("runs show", "tuft runs show RUN_ID [--url URL] [--api-key KEY]", "Show one training run and its checkpoints.")
	}
	mk := restFlags(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	n := 0
	if sub == "show" {
		n = 1
	}
	if err := fs.args(n, n); err != nil {
		return err
	}
	rc, err := mk()
	if err != nil {
		return err
	}
	ctx := context.Background()
	if sub == "show" {
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

// checkpointVerbs are the checkpoints subcommands: usage line, summary and how many
// positional arguments each takes (min, max).
var checkpointVerbs = map[string]struct {
	synopsis, summary string
	min, max          int
}{
	"list":      {"tuft checkpoints list [RUN_ID] [--url URL] [--api-key KEY]", "List the checkpoints of one run, or of every run.", 0, 1},
	"download":  {"tuft checkpoints download PATH [-o FILE] [--url URL] [--api-key KEY]", "Download a checkpoint (tinker:// path) as a tar of the PEFT adapter.", 1, 1},
	"delete":    {"tuft checkpoints delete PATH [--url URL] [--api-key KEY]", "Delete a checkpoint.", 1, 1},
	"publish":   {"tuft checkpoints publish PATH [--url URL] [--api-key KEY]", "Make a checkpoint readable by other tenants.", 1, 1},
	"unpublish": {"tuft checkpoints unpublish PATH [--url URL] [--api-key KEY]", "Make a published checkpoint private again.", 1, 1},
}

func cmdCheckpoints(args []string) error {
	sub, args, err := verb(args, "list", "download", "delete", "publish", "unpublish")
	if err != nil {
		return err
	}
	v := checkpointVerbs[sub]
	fs := newFlags("checkpoints "+sub, v.synopsis, v.summary)
	mk := restFlags(fs)
	var outPath *string
	if sub == "download" {
		outPath = fs.String("o", "", "output file (default <run>_<name>.tar)")
	}
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := fs.args(v.min, v.max); err != nil {
		return err
	}
	rc, err := mk()
	if err != nil {
		return err
	}
	ctx := context.Background()
	switch sub {
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
	default: // delete, publish, unpublish
		var err error
		switch sub {
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
		fmt.Printf("%sd %s\n", strings.TrimSuffix(sub, "e"), fs.Arg(0))
		return nil
	}
}
