package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/tuft-go/tuft/client"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/export"
	"github.com/tuft-go/tuft/internal/cli"
)

const exportSynopsis = "tuft checkpoints export PATH --format peft|hf|gguf|gguf-lora [--quant f16|bf16|q8_0] [-o OUT] [--model DIR] [--url URL] [--api-key KEY]"

const exportSummary = "Export a checkpoint for other tools (docs/export.md): peft (an adapter for peft and vLLM), hf (the merged model " +
	"in Hugging Face layout, bfloat16), gguf (the merged model for llama.cpp, with an Ollama Modelfile), gguf-lora (a llama.cpp " +
	"LoRA adapter and its base model as GGUF, with a Modelfile). PATH is a tinker:// path (the server exports it) or a local " +
	"checkpoint directory (exported here; hf, gguf and gguf-lora then need --model, the base model's directory)."

// cmdCheckpointsExport is `tuft checkpoints export`. Flags may come before or after PATH.
func cmdCheckpointsExport(args []string) error {
	fs := cli.NewFlags("checkpoints export", exportSynopsis, exportSummary)
	ep := endpointFlags(fs)
	format := fs.String("format", "", "peft, hf, gguf or gguf-lora (required)")
	quant := fs.String("quant", "", "GGUF tensor type of gguf and gguf-lora: f16 (default), bf16 or q8_0")
	out := fs.String("o", "", "output directory (default <run>_<name>_<format>, or <dir>_<format> for a local checkpoint)")
	model := fs.String("model", "", "base model (directory or .gguf file), for a local checkpoint in hf, gguf or gguf-lora")
	var pos []string
	for rest := args; ; {
		if err := fs.ParseArgs(rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) != 1 {
		return &cli.UsageError{Err: fmt.Errorf("got %d argument(s), want 1", len(pos)), Usage: fs.UsageText()}
	}
	if *format == "" {
		return &cli.UsageError{Err: errors.New("--format is required (peft, hf, gguf or gguf-lora)"), Usage: fs.UsageText()}
	}
	f, err := export.ParseFormat(*format)
	if err != nil {
		return err
	}
	if _, err := export.ParseQuant(f, *quant); err != nil {
		return err
	}
	path := pos[0]
	dir := *out
	if dir == "" && strings.HasPrefix(path, "tinker://") {
		dir = strings.NewReplacer("tinker://", "", "/", "_", ":", "_").Replace(path) + "_" + *format
	} else if dir == "" {
		dir = filepath.Base(filepath.Clean(path)) + "_" + *format
	}
	var files []string
	if strings.HasPrefix(path, "tinker://") {
		files, err = exportRemote(ep, path, *format, *quant, dir)
	} else {
		files, err = exportLocal(f, *quant, path, *model, dir)
	}
	if err != nil {
		return err
	}
	fmt.Printf("exported %s as %s into %s:\n", path, f, dir)
	for _, n := range files {
		fmt.Printf("  %s\n", filepath.Join(dir, n))
	}
	return nil
}

// exportLocal exports a checkpoint directory with the base model loaded here.
func exportLocal(f export.Format, quant, ckpt, modelDir, dir string) ([]string, error) {
	o := export.Options{Format: f, Quant: quant, Adapter: ckpt}
	if export.NeedsModel(f) {
		if modelDir == "" {
			return nil, &cli.UsageError{Err: fmt.Errorf("--model is required to export a local checkpoint as %s (the base model's directory)", f)}
		}
		m, err := engine.Load(modelDir, filepath.Base(filepath.Clean(modelDir)))
		if err != nil {
			return nil, err
		}
		o.Model, o.Base, o.TokenizerJSON = m, modelDir, m.TokenizerJSON
	}
	return export.Write(o, dir)
}

// exportRemote asks the server for the export and unpacks its tar into dir.
func exportRemote(ep func() (string, string, error), path, format, quant, dir string) ([]string, error) {
	u, k, err := ep()
	if err != nil {
		return nil, err
	}
	rc, err := client.NewRestClient(u, k)
	if err != nil {
		return nil, err
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("%s is not empty", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := rc.DownloadExport(context.Background(), path, format, quant, pw, nil)
		pw.CloseWithError(err)
		done <- err
	}()
	files, uerr := untar(pr, dir)
	pr.CloseWithError(errors.New("stopped reading"))
	if derr := <-done; derr != nil {
		return nil, derr
	}
	return files, uerr
}

// untar writes the regular files of a tar into dir; a name that is not a plain file name
// is refused (the server's exports are flat).
func untar(r io.Reader, dir string) ([]string, error) {
	tr := tar.NewReader(r)
	var files []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return files, fmt.Errorf("export archive: %w", err)
		}
		if h.Typeflag != tar.TypeReg || h.Name != filepath.Base(h.Name) || h.Name == "." || h.Name == ".." {
			return files, fmt.Errorf("export archive: entry %q is not a plain file", h.Name)
		}
		f, err := os.Create(filepath.Join(dir, h.Name))
		if err != nil {
			return files, err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return files, err
		}
		files = append(files, h.Name)
	}
}
