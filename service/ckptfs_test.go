package service

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// A checkpoint's archive is a tar of its regular files, in name order, whose byte count
// WriteTo reports; a checkpoint whose files are gone fails at open, before any byte.
func TestArchiveStream(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"adapter_model.safetensors": "weights", "adapter_config.json": `{"r":2}`}
	for n, body := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil { // not a regular file: left out
		t.Fatal(err)
	}
	a, err := openArchive(Checkpoint{RunID: "s:train:0", Type: CkptSampler, Name: "c", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if a.FileName() != "s_train_0_c.tar" {
		t.Errorf("FileName = %q", a.FileName())
	}
	var buf bytes.Buffer
	n, err := a.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo = %d, %v; wrote %d bytes", n, err, buf.Len())
	}
	tr := tar.NewReader(&buf)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		if string(body) != files[h.Name] {
			t.Errorf("%s: %q, want %q", h.Name, body, files[h.Name])
		}
		names = append(names, h.Name)
	}
	if len(names) != 2 || names[0] != "adapter_config.json" || names[1] != "adapter_model.safetensors" {
		t.Errorf("archive holds %v", names)
	}
	if _, err := openArchive(Checkpoint{Dir: filepath.Join(dir, "gone")}); KindOf(err) != KindNotFound {
		t.Errorf("archive of missing files: %v", err)
	}
}

// A signed file link opens one regular file of its checkpoint, nothing else.
func TestOpenCheckpointFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.age"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := openCheckpointFile(dir, "a.age")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "x" || f.Name != "a.age" {
		t.Errorf("read %q from %s", b, f.Name)
	}
	for _, bad := range []string{"d", "../a.age", "missing", ".", ".."} {
		if _, err := openCheckpointFile(dir, bad); KindOf(err) != KindNotFound {
			t.Errorf("openCheckpointFile(%q): %v, want not found", bad, err)
		}
	}
}
