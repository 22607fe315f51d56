package api_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
)

// adapterCounter is the in-process executor, counting the adapters it holds.
type adapterCounter struct {
	backend.Executor
	mu   sync.Mutex
	held map[string]bool
}

func (c *adapterCounter) set(lora string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if on {
		c.held[lora] = true
	} else {
		delete(c.held, lora)
	}
}

func (c *adapterCounter) CreateAdapter(ctx context.Context, model, lora string, cfg engine.LoraConfig) error {
	err := c.Executor.CreateAdapter(ctx, model, lora, cfg)
	if err == nil {
		c.set(lora, true)
	}
	return err
}

func (c *adapterCounter) LoadState(ctx context.Context, model, lora, dir string, opt bool, want engine.OptimizerConfig) error {
	err := c.Executor.LoadState(ctx, model, lora, dir, opt, want)
	if err == nil {
		c.set(lora, true)
	}
	return err
}

func (c *adapterCounter) RemoveAdapter(ctx context.Context, model, lora string) error {
	c.set(lora, false)
	return c.Executor.RemoveAdapter(ctx, model, lora)
}

func (c *adapterCounter) ids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k := range c.held {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Inflight sampling clients (kind="inflight") follow their run's newest inflight save: a
// client samples the weights saved when it was created until the next inflight save,
// then those; every client is its own sampling session; and the run keeps one target
// (one directory, one executor adapter) however many saves it makes.
func TestInflightSamplersFollowTheRun(t *testing.T) {
	t.Parallel()
	m, err := engine.Load(testenv.TinyDir(t), testenv.Model)
	if err != nil {
		t.Fatal(err)
	}
	ex := &adapterCounter{held: map[string]bool{}, Executor: backend.NewLocal([]*engine.Model{m}, []backend.ModelInfo{{Name: testenv.Model,
		Arch: m.Cfg.Arch, VocabSize: m.Cfg.VocabSize, MaxContextLength: m.Cfg.MaxPositions, Signature: "tiny", Config: m.Cfg}})}
	cfg := testenv.Config(t, t.TempDir(), "memory")
	s := testenv.StartWith(t, cfg, server.Options{Executor: ex})
	h := &harness{t: t, url: s.URL(), a: testenv.NewClient(t, s.URL(), testenv.KeyA), b: testenv.NewClient(t, s.URL(), testenv.KeyB)}
	sess := h.session(h.a)
	model := h.model(h.a, sess, 0, 4)
	seq, samplerSeq := 0, 0
	inflight := func(kind string) string {
		seq++
		samplerSeq++
		var f future
		h.a.Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": model, "seq_id": seq, "sampling_session_seq_id": samplerSeq,
			"kind": kind, "type": "save_weights_for_sampler"}, &f)
		var res struct {
			SamplingSessionID string `json:"sampling_session_id"`
		}
		h.a.Result(f.RequestID, &res)
		if res.SamplingSessionID == "" {
			t.Fatal("no sampling session")
		}
		return res.SamplingSessionID
	}
	// What a sampler's weights say about a prompt: its prompt logprobs.
	sampleSeq := 0
	scores := func(sampler string) []float64 {
		sampleSeq++
		var f sampleFuture
		h.a.Post("/api/v1/asample", map[string]any{"sampling_session_id": sampler, "seq_id": sampleSeq, "num_samples": 1,
			"prompt": prompt(11, 12, 13, 14, 15), "prompt_logprobs": true, "sampling_params": map[string]any{"max_tokens": 1, "temperature": 0}}, &f)
		var out sampleJSON
		h.a.Result(f.RequestID, &out)
		var lp []float64
		for _, p := range out.PromptLogprobs[1:] {
			lp = append(lp, *p)
		}
		return lp
	}
	train := func() {
		for i := 0; i < 3; i++ {
			seq++
			var f future
			h.a.Post("/api/v1/forward_backward", fwdbwdJSON(model, seq, datum(11, 8)), &f)
			h.a.Result(f.RequestID, nil)
			seq++
			h.a.Post("/api/v1/optim_step", optim(model, seq, 0.05), &f)
			h.a.Result(f.RequestID, nil)
		}
	}
	eq := func(a, b []float64) bool { return slices.Equal(a, b) }

	a := inflight("inflight")
	w1 := scores(a)
	snap := inflight("snapshot")
	train()
	if got := scores(a); !eq(got, w1) {
		t.Fatalf("the inflight client moved without an inflight save: %v → %v", w1, got)
	}
	b := inflight("inflight")
	w2 := scores(b)
	if eq(w1, w2) {
		t.Fatal("training did not change the weights")
	}
	if got := scores(a); !eq(got, w2) {
		t.Fatalf("after the next inflight save, the earlier client samples %v, the new one %v", got, w2)
	}
	if got := scores(snap); !eq(got, w1) {
		t.Fatalf("a snapshot client followed the run: %v, want %v", got, w1)
	}
	if a == b {
		t.Fatal("each inflight client must be a sampling session of its own")
	}
	// More saves: still one target on disk and in the executor.
	for i := 0; i < 4; i++ {
		train()
		inflight("inflight")
	}
	if got := scores(a); eq(got, w2) {
		t.Fatal("the first inflight client did not follow later saves")
	}
	runDir := ""
	_ = filepath.WalkDir(cfg.CheckpointDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "_inflight" {
			runDir = filepath.Dir(p)
		}
		return nil
	})
	ents, _ := os.ReadDir(runDir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "_autosave _ephemeral _inflight" {
		t.Fatalf("run directory holds %v: want one inflight target (and the one snapshot's _ephemeral)", names)
	}
	if snaps, _ := os.ReadDir(filepath.Join(runDir, "_ephemeral")); len(snaps) != 1 {
		t.Fatalf("%d snapshot copies, want 1", len(snaps))
	}
	inflightAdapters := 0
	for _, id := range ex.ids() {
		if strings.HasSuffix(id, "/inflight") {
			inflightAdapters++
		}
	}
	if inflightAdapters != 1 {
		t.Fatalf("executor adapters %v: want one inflight adapter for the run", ex.ids())
	}
	// A named checkpoint cannot be inflight; an unknown kind is refused by name.
	seq++
	if r := h.a.Do("POST", "/api/v1/save_weights_for_sampler", map[string]any{"model_id": model, "seq_id": seq, "path": "x", "kind": "inflight"}, nil); r.Status != 400 ||
		!strings.Contains(string(r.Body), "inflight") {
		t.Fatalf("named inflight save: %d %s", r.Status, r.Body)
	}
	// Finishing the session releases the shared adapter.
	h.a.Post("/api/v1/sessions/"+sess+"/finish", map[string]any{"reason": map[string]any{"type": "success"}}, nil)
	for _, id := range ex.ids() {
		if strings.HasSuffix(id, "/inflight") {
			t.Fatalf("inflight adapter %s outlived its session", id)
		}
	}
}
