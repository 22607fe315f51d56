package adversarial

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/internal/testenv/check"
)

// Exports through the archive route (docs/export.md) leave nothing behind and grant
// nothing the plain archive does not: every export's temporary files are gone after a
// whole download, a refused one and one the client abandons; a forged or expired token is
// a 403 whatever the format; another tenant gets no link; an unknown format is a 400
// naming it.
func TestExportLeavesNothingAndGrantsNothingMore(t *testing.T) {
	// The tiny preset is written once per test binary into the temporary directory of the
	// moment: write it before TMPDIR points into this test's directory, which goes with it.
	testenv.TinyDir(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the exports' temporary directories go here
	cfg := testenv.Config(t, t.TempDir(), "memory")
	s := testenv.Start(t, cfg)
	a, b := newTenant(t, s.URL(), testenv.KeyA), newTenant(t, s.URL(), testenv.KeyB)
	model := a.model(a.session(), 0) // trains lm_head: refused as peft
	a.c.Result(a.fb(model, 1), nil)
	a.c.Result(a.optim(model, 2, 1e-2), nil)
	a.c.Result(a.submit("/api/v1/save_weights", map[string]any{"model_id": model, "path": "x", "seq_id": 3}), nil)
	route := "/api/v1/training_runs/" + model + "/checkpoints/weights/x/archive"
	link := func(q string) string {
		r := a.c.Do("GET", route+q, nil, map[string]string{"Accept": "application/json"})
		if r.Status != http.StatusFound {
			t.Fatalf("%s: %d %s", q, r.Status, r.Body)
		}
		return r.Header.Get("Location")
	}
	exports := func() []string {
		ents, _ := os.ReadDir(tmp)
		var out []string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "tuft-export-") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	anon := testenv.NewClient(t, "", "")
	if d := anon.Do("GET", link("?format=gguf&quant=bf16"), nil, nil); d.Status != 200 || len(d.Body) < 1<<20 {
		t.Fatalf("gguf export: %d (%d bytes)", d.Status, len(d.Body))
	}
	if d := anon.Do("GET", link("?format=peft"), nil, nil); d.Status != http.StatusBadRequest || !strings.Contains(string(d.Body), "lm_head") {
		t.Fatalf("peft export of an lm_head adapter: %d %s", d.Status, d.Body)
	}
	// A client that reads a little and goes away.
	req, _ := http.NewRequestWithContext(context.Background(), "GET", link("?format=hf"), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.CopyN(io.Discard, resp.Body, 1024)
	resp.Body.Close()
	check.Eventually(t, 10*time.Second, "the abandoned export's files to be removed", func() bool { return len(exports()) == 0 })

	l := link("?format=hf")
	tok := strings.TrimPrefix(strings.SplitN(l, "?", 2)[0], s.URL()+"/api/v1/archive/")
	for _, forged := range []string{tok[:len(tok)-2] + "xy", "AAAA." + tok[5:], tok + "x"} {
		if d := anon.Do("GET", s.URL()+"/api/v1/archive/"+forged+"?format=hf", nil, nil); d.Status != http.StatusForbidden {
			t.Errorf("forged token %q: %d %s", forged, d.Status, d.Body)
		}
	}
	if r := b.c.Do("GET", route+"?format=gguf", nil, map[string]string{"Accept": "application/json"}); r.Status != http.StatusNotFound {
		t.Errorf("another tenant's export link: %d %s", r.Status, r.Body)
	}
	for _, q := range []string{"?format=../../etc", "?format=gguf&quant=q2_k", "?format=GGUF"} {
		if r := a.c.Do("GET", route+q, nil, map[string]string{"Accept": "application/json"}); r.Status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", q, r.Status, r.Body)
		}
	}
	// A checkpoint whose files are gone from the disk is a 404, not a 500.
	a.c.Result(a.submit("/api/v1/save_weights", map[string]any{"model_id": model, "path": "gone", "seq_id": 4}), nil)
	r := a.c.Do("GET", "/api/v1/training_runs/"+model+"/checkpoints/weights/gone/archive?format=gguf", nil, map[string]string{"Accept": "application/json"})
	if err := os.RemoveAll(filepath.Join(cfg.CheckpointDir, model, "weights", "gone")); err != nil {
		t.Fatal(err)
	}
	if d := anon.Do("GET", r.Header.Get("Location"), nil, nil); d.Status != http.StatusNotFound {
		t.Errorf("export of a checkpoint without files: %d %s", d.Status, d.Body)
	}
	if left := exports(); len(left) > 0 {
		t.Fatalf("exports left %v", left)
	}
}
