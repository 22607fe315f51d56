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
	"github.com/tuft-go/tuft/internal/cli"
)

// restFlags adds --url and --api-key and returns a constructor for the REST client.
func restFlags(fs *cli.Flags) func() (*client.RestClient, error) {
	ep := endpointFlags(fs)
	return func() (*client.RestClient, error) {
		u, k, err := ep()
		if err != nil {
			return nil, err
		}
		return client.NewRestClient(u, k)
	}
}

// endpointFlags adds --url and --api-key and returns their values, with the
// environment's and the defaults applied.
func endpointFlags(fs *cli.Flags) func() (url, key string, err error) {
	url := fs.String("url", "", "server URL ($TUFT_URL, default http://127.0.0.1:10610)")
	key := fs.String("api-key", "", "API key ($TUFT_API_KEY, else $TUFT_HOME/api_key)")
	return func() (string, string, error) {
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
				return "", "", fmt.Errorf("no API key: pass --api-key, set TUFT_API_KEY, or run `tuft launch` once")
			}
			k = strings.TrimSpace(string(b))
		}
		return u, k, nil
	}
}

func cmdRuns(args []string) error {
	sub, args, err := verb(args, "list", "show")
	if err != nil {
		return err
	}
	fs := cli.NewFlags("runs list", "tuft runs list [--url URL] [--api-key KEY]", "List the tenant's training runs.")
	if sub == "show" {
		fs = cli.NewFlags("runs show", "tuft runs show RUN_ID [--url URL] [--api-key KEY]", "Show one training run and its checkpoints.")
	}
	mk := restFlags(fs)
	if err := fs.ParseArgs(args); err != nil {
		return err
	}
	n := 0
	if sub == "show" {
		n = 1
	}
	if err := fs.CheckArgs(n, n); err != nil {
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
	"list": {"tuft checkpoints list [RUN_ID] [--url URL] [--api-key KEY]", "List the checkpoints of one run, or of every run.", 0, 1},
	"download": {"tuft checkpoints download PATH [-o OUT] [--external] [--url URL] [--api-key KEY]",
		"Download a checkpoint (tinker:// path): a training or sampler checkpoint as a tar of the PEFT adapter, or with --external as the " +
			"adapter's files in Hugging Face PEFT format (exported encrypted and decrypted here, like tinker-cookbook's weights.download); " +
			"an external_weights checkpoint as its files (encrypted ones as they are).", 1, 1},
	"delete":    {"tuft checkpoints delete PATH [--url URL] [--api-key KEY]", "Delete a checkpoint.", 1, 1},
	"publish":   {"tuft checkpoints publish PATH [--url URL] [--api-key KEY]", "Make a checkpoint readable by other tenants.", 1, 1},
	"unpublish": {"tuft checkpoints unpublish PATH [--url URL] [--api-key KEY]", "Make a published checkpoint private again.", 1, 1},
}

func cmdCheckpoints(args []string) error {
	sub, args, err := verb(args, "list", "download", "export", "delete", "publish", "unpublish")
	if err != nil {
		return err
	}
	if sub == "export" {
		return cmdCheckpointsExport(args)
	}
	v := checkpointVerbs[sub]
	fs := cli.NewFlags("checkpoints "+sub, v.synopsis, v.summary)
	ep := endpointFlags(fs)
	mk := func() (*client.RestClient, error) {
		u, k, err := ep()
		if err != nil {
			return nil, err
		}
		return client.NewRestClient(u, k)
	}
	var outPath *string
	var external *bool
	if sub == "download" {
		outPath = fs.String("o", "", "output: the tar file (default <run>_<name>.tar), or the directory of --external and external_weights files (default <run>_<name>)")
		external = fs.Bool("external", false, "export a training checkpoint in Hugging Face PEFT format and download its files (through an encrypted external checkpoint, deleted afterwards)")
	}
	if err := fs.ParseArgs(args); err != nil {
		return err
	}
	if err := fs.CheckArgs(v.min, v.max); err != nil {
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
		if *external || strings.Contains(path, "/external_weights/") {
			return downloadExternal(ctx, rc, ep, path, *outPath, *external)
		}
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

// downloadExternal downloads a checkpoint's files in Hugging Face PEFT format into a
// directory: an external_weights checkpoint as its files are (encrypted ones stay
// encrypted), or a training checkpoint (export) through an encrypted export made for
// this download and deleted after it.
func downloadExternal(ctx context.Context, rc *client.RestClient, ep func() (string, string, error), path, out string, export bool) error {
	if out == "" {
		out = strings.NewReplacer("tinker://", "", "/", "_", ":", "_").Replace(path)
	}
	report := func(file string, n int64) { fmt.Printf("  %s (%d bytes)\n", filepath.Join(out, file), n) }
	var files []string
	var err error
	if strings.Contains(path, "/external_weights/") {
		files, err = rc.DownloadExternal(ctx, path, out, nil, report)
	} else {
		if !export {
			return fmt.Errorf("%s is not an external_weights checkpoint: pass --external to export it", path)
		}
		u, k, eerr := ep()
		if eerr != nil {
			return eerr
		}
		sc, serr := client.NewServiceClient(ctx, u, k)
		if serr != nil {
			return serr
		}
		defer sc.Close()
		fmt.Printf("exporting %s in Hugging Face PEFT format (a training run of a new session; the export is encrypted to a key made for this download)\n", path)
		files, err = sc.ExportAndDownload(ctx, path, out, report)
	}
	if err != nil {
		return err
	}
	fmt.Printf("wrote %d files into %s\n", len(files), out)
	return nil
}
