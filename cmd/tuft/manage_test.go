package main

import (
	"archive/tar"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/client"
	"github.com/tuft-go/tuft/internal/testenv"
)

func TestManagementCommands(t *testing.T) {
	s := testenv.Start(t, testenv.Config(t, t.TempDir(), "memory"))
	ctx := context.Background()
	sc, err := client.NewServiceClient(ctx, s.URL(), testenv.KeyA)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	tc, err := sc.CreateLoRATrainingClient(ctx, testenv.Model, client.DefaultLora(4))
	if err != nil {
		t.Fatal(err)
	}
	d := wire.Datum{Tokens: []int32{1, 2, 3}, LossInputs: map[string]wire.Tensor{"target_tokens": {DType: wire.Int64, Shape: []int{3}, I64: []int64{2, 3, 4}}}}
	fb, _ := tc.ForwardBackward(ctx, []wire.Datum{d}, "cross_entropy", nil)
	if _, err := fb.Result(ctx); err != nil {
		t.Fatal(err)
	}
	f, _ := tc.SaveWeightsForSampler(ctx, "cli")
	path, err := f.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "tuft")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	run := func(args ...string) string {
		args = append(args, "--url", s.URL(), "--api-key", testenv.KeyA)
		// Flags go after the subcommand's verb; positional arguments last.
		out, err := exec.Command(bin, reorder(args)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tuft %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := run("runs", "list"); !strings.Contains(out, tc.ModelID) {
		t.Fatalf("runs list:\n%s", out)
	}
	if out := run("runs", "show", tc.ModelID); !strings.Contains(out, "lora rank:     4") {
		t.Fatalf("runs show:\n%s", out)
	}
	if out := run("checkpoints", "list", tc.ModelID); !strings.Contains(out, path) {
		t.Fatalf("checkpoints list:\n%s", out)
	}
	tarPath := filepath.Join(t.TempDir(), "a.tar")
	run("checkpoints", "download", "-o", tarPath, path)
	tf, err := os.Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	tr := tar.NewReader(tf)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names[h.Name] = true
	}
	tf.Close()
	if !names["adapter_config.json"] || !names["adapter_model.safetensors"] {
		t.Fatalf("archive holds %v", names)
	}
	// tuft checkpoint export: through the server (a tinker:// path, flags after it), and
	// a local checkpoint directory with the base model here; an unknown format is refused.
	gg := filepath.Join(t.TempDir(), "gguf")
	if out, err := exec.Command(bin, "checkpoint", "export", path, "--format", "gguf", "--quant", "q8_0", "-o", gg,
		"--url", s.URL(), "--api-key", testenv.KeyA).CombinedOutput(); err != nil || !strings.Contains(string(out), "model-q8_0.gguf") {
		t.Fatalf("checkpoint export: %v\n%s", err, out)
	}
	if mf, err := os.ReadFile(filepath.Join(gg, "Modelfile")); err != nil || !strings.Contains(string(mf), "FROM ./model-q8_0.gguf") {
		t.Fatalf("Modelfile: %v\n%s", err, mf)
	}
	local := filepath.Join(t.TempDir(), "peft")
	if out, err := exec.Command(bin, "checkpoints", "export", "--format", "peft", "-o", local, filepath.Join(t.TempDir(), "missing")).CombinedOutput(); err == nil {
		t.Fatalf("export of a missing directory succeeded:\n%s", out)
	}
	if out, err := exec.Command(bin, "checkpoints", "export", "--format", "onnx", "-o", local, path).CombinedOutput(); err == nil || !strings.Contains(string(out), `"onnx"`) {
		t.Fatalf("unknown format: %v\n%s", err, out)
	}
	// Hugging Face PEFT files: an export of a training checkpoint (--external: encrypted
	// on the server, decrypted here, then deleted) and an external_weights checkpoint.
	sf, _ := tc.SaveState(ctx, "st")
	state, err := sf.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ef, _ := tc.SaveWeightsExternal(ctx, "plain", 0, nil)
	exp, err := ef.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exported, plain := filepath.Join(t.TempDir(), "x"), filepath.Join(t.TempDir(), "p")
	run("checkpoints", "download", "--external", "true", "-o", exported, state)
	run("checkpoints", "download", "-o", plain, exp.Path)
	for _, f := range []string{"adapter_config.json", "adapter_model.safetensors"} {
		a, err1 := os.ReadFile(filepath.Join(exported, f))
		b, err2 := os.ReadFile(filepath.Join(plain, f))
		if err1 != nil || err2 != nil || string(a) != string(b) {
			t.Fatalf("%s: the export of %s and %s differ (%v %v)", f, state, exp.Path, err1, err2)
		}
	}
	if out := run("checkpoints", "list"); strings.Contains(out, "external_weights/download") {
		t.Fatalf("the temporary export was left behind:\n%s", out)
	}
	run("checkpoints", "publish", path)
	if out := run("checkpoints", "list", tc.ModelID); !strings.Contains(out, "true") {
		t.Fatalf("not public:\n%s", out)
	}
	run("checkpoints", "delete", path)
	if out := run("checkpoints", "list", tc.ModelID); strings.Contains(out, path) {
		t.Fatalf("not deleted:\n%s", out)
	}
}

// reorder puts flags (and their values) before positional arguments, after the verb.
func reorder(args []string) []string {
	head := args[:2]
	var flags, pos []string
	for i := 2; i < len(args); i++ {
		if strings.HasPrefix(args[i], "-") {
			if args[i] == "--external" { // a boolean flag: its value joins it
				flags = append(flags, args[i]+"="+args[i+1])
			} else {
				flags = append(flags, args[i], args[i+1])
			}
			i++
		} else {
			pos = append(pos, args[i])
		}
	}
	return append(append(append([]string{}, head...), flags...), pos...)
}
