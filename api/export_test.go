package api_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/client"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
)

func tarNames(t *testing.T, b []byte) []string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("tar: %v", err)
		}
		names = append(names, h.Name)
	}
}

// The archive route's ?format= exports a checkpoint through the same signed link: an
// unknown format or quant is a 400 naming it before a link is signed, a module the
// format cannot carry is a 400 saying why, and the Go client downloads an export.
func TestCheckpointExportRoute(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	model := h.model(h.a, h.session(h.a), 0, 4) // trains lm_head too
	path := h.trainAndSave(model, "exp")
	route := "/api/v1/training_runs/" + model + "/checkpoints/weights/exp/archive"
	for _, c := range []struct{ query, names string }{{"?format=onnx", `\"onnx\"`}, {"?format=gguf&quant=q4_k", `\"q4_k\"`}, {"?format=hf&quant=q8_0", "quant"}, {"?quant=f16", "quant"}} {
		r := h.a.Do("GET", route+c.query, nil, map[string]string{"Accept": "application/json"})
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), c.names) {
			t.Errorf("%s: %d %s, want a 400 naming %s", c.query, r.Status, r.Body, c.names)
		}
	}
	anon := testenv.NewClient(t, "", "")
	r := h.a.Do("GET", route+"?format=gguf&quant=q8_0", nil, map[string]string{"Accept": "application/json"})
	loc := r.Header.Get("Location")
	if r.Status != http.StatusFound || !strings.Contains(loc, "format=gguf") || !strings.Contains(loc, "quant=q8_0") {
		t.Fatalf("gguf link: %d %q %s", r.Status, loc, r.Body)
	}
	d := anon.Do("GET", loc, nil, nil)
	if d.Status != 200 {
		t.Fatalf("gguf download: %d %s", d.Status, d.Body)
	}
	if names := strings.Join(tarNames(t, d.Body), ","); names != "model-q8_0.gguf,Modelfile" {
		t.Errorf("gguf export holds %s", names)
	}
	if !bytes.Contains(d.Body, []byte("GGUF")) {
		t.Error("no GGUF header in the download")
	}
	// The run trains lm_head: an adapter format refuses it with the reason.
	r = h.a.Do("GET", route+"?format=peft", nil, map[string]string{"Accept": "application/json"})
	d = anon.Do("GET", r.Header.Get("Location"), nil, nil)
	if d.Status != http.StatusBadRequest || !strings.Contains(string(d.Body), "lm_head") || !strings.Contains(string(d.Body), "vLLM") {
		t.Errorf("peft export of an lm_head adapter: %d %s", d.Status, d.Body)
	}
	// Another tenant cannot get a link.
	if r := h.b.Do("GET", route+"?format=hf", nil, map[string]string{"Accept": "application/json"}); r.Status != http.StatusNotFound {
		t.Errorf("other tenant: %d %s", r.Status, r.Body)
	}
	rc, err := client.NewRestClient(h.url, testenv.KeyA)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := rc.DownloadExport(context.Background(), path, "hf", "", &buf, nil); err != nil {
		t.Fatal(err)
	}
	names := strings.Join(tarNames(t, buf.Bytes()), ",")
	for _, want := range []string{"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} {
		if !strings.Contains(names, want) {
			t.Errorf("hf export lacks %s: %s", want, names)
		}
	}
	if _, err := rc.DownloadExport(context.Background(), path, "safetensors", "", io.Discard, nil); err == nil || !strings.Contains(err.Error(), "safetensors") {
		t.Errorf("client, unknown format: %v", err)
	}
}

// gatedExec is the in-process executor whose exports wait for a gate, so a test holds an
// export running.
type gatedExec struct {
	*backend.Local
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedExec) Export(ctx context.Context, model, ckptDir, format, quant, out string) ([]string, error) {
	g.entered <- struct{}{}
	<-g.gate
	return g.Local.Export(ctx, model, ckptDir, format, quant, out)
}

// limits.max_exports_per_tenant: an export beyond it is a 429 with Retry-After naming the
// key, and the slot is free again once the running export is written.
func TestExportsPerTenantLimit(t *testing.T) {
	t.Parallel()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	models, infos, err := backend.LoadModels(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ex := &gatedExec{Local: backend.NewLocal(models, infos), entered: make(chan struct{}, 4), gate: make(chan struct{})}
	s := testenv.StartWith(t, cfg, server.Options{Executor: ex, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	h := &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	model := h.model(h.a, h.session(h.a), 0, 4)
	h.trainAndSave(model, "lim")
	route := "/api/v1/training_runs/" + model + "/checkpoints/weights/lim/archive?format=hf"
	link := func() string {
		return h.a.Do("GET", route, nil, map[string]string{"Accept": "application/json"}).Header.Get("Location")
	}
	anon := testenv.NewClient(t, "", "")
	first := make(chan *testenv.Response, 1)
	go func() { first <- anon.Do("GET", link(), nil, nil) }()
	<-ex.entered
	d := anon.Do("GET", link(), nil, nil)
	if d.Status != http.StatusTooManyRequests || d.Header.Get("Retry-After") == "" || !strings.Contains(string(d.Body), "limits.max_exports_per_tenant") {
		t.Fatalf("second export: %d %v %s", d.Status, d.Header, d.Body)
	}
	close(ex.gate)
	if r := <-first; r.Status != 200 {
		t.Fatalf("first export: %d %s", r.Status, r.Body)
	}
	if d := anon.Do("GET", link(), nil, nil); d.Status != 200 {
		t.Fatalf("export after the first finished: %d %s", d.Status, d.Body)
	}
}
