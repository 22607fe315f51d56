package openai_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/tokenizer"
	"github.com/tuft-go/tuft/internal/testenv"
	"github.com/tuft-go/tuft/server"
	"github.com/tuft-go/tuft/worker"
)

// gated runs the real in-process executor, but the first printable token of each
// streamed sample waits for the test to open the gate: while it waits, the generation
// provably has not finished, and the text up to that token can be sent.
type gated struct {
	*backend.Local
	tok  engine.TextCodec
	gate chan struct{} // closed by the test to let generation go on
	hit  chan struct{} // closed when the gating token has been reported
	done chan error    // each SampleStream's outcome
}

func newGated(t *testing.T, cfg config.Config) *gated {
	models, infos, err := backend.LoadModels(cfg, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	return &gated{Local: backend.NewLocal(models, infos), tok: models[0].Tok, gate: make(chan struct{}), hit: make(chan struct{}), done: make(chan error, 8)}
}

// printable reports whether a token's text, as it extends its sequence's text (s decodes
// the sequence after the prompt, as the server does), is plain printable ASCII: once such
// a token is drawn, all text before it can be sent (no UTF-8 character is left open).
func printable(s *tokenizer.Stream, id int32) bool {
	text := s.Next(id)
	for i := 0; i < len(text); i++ {
		if text[i] < 0x20 || text[i] > 0x7e {
			return false
		}
	}
	return strings.TrimSpace(text) != ""
}

func (g *gated) SampleStream(ctx context.Context, model, lora string, req engine.SampleRequest, st backend.Stream) (engine.SampleResult, error) {
	inner := st.OnToken
	var once sync.Once
	var mu sync.Mutex
	texts := map[int]*tokenizer.Stream{} // each sequence's text, by ev.Seq
	st.OnToken = func(ev engine.TokenEvent) {
		inner(ev)
		mu.Lock()
		s := texts[ev.Seq]
		if s == nil {
			s = tokenizer.NewStreamAfter(g.tok, req.Prompt)
			texts[ev.Seq] = s
		}
		ok := printable(s, ev.Token) // every token, so the next one's text is in context
		mu.Unlock()
		if ev.Stop != "" || !ok {
			return
		}
		once.Do(func() {
			close(g.hit)
			select {
			case <-g.gate:
			case <-ctx.Done():
			}
		})
	}
	res, err := g.Local.SampleStream(ctx, model, lora, req, st)
	g.done <- err
	return res, err
}

func start(t *testing.T, mutate func(*config.Config), ex backend.Executor) (*server.Server, config.Config) {
	t.Helper()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	if mutate != nil {
		mutate(&cfg)
	}
	o := server.Options{}
	if ex != nil {
		o.Executor = ex
	}
	return testenv.StartWith(t, cfg, o), cfg
}

func post(t *testing.T, s *server.Server, path, key string, body any) (*http.Response, []byte) {
	t.Helper()
	resp := open(t, context.Background(), s, path, key, body)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp, buf.Bytes()
}

func open(t *testing.T, ctx context.Context, s *server.Server, path, key string, body any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// events reads SSE data lines.
type events struct{ sc *bufio.Scanner }

func (e *events) next(t *testing.T) string {
	t.Helper()
	for e.sc.Scan() {
		if d, ok := strings.CutPrefix(e.sc.Text(), "data: "); ok {
			return d
		}
	}
	t.Fatalf("stream ended: %v", e.sc.Err())
	return ""
}

func chunkText(t *testing.T, data string) string {
	var c struct {
		Choices []struct {
			Delta struct {
				Content *string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		t.Fatalf("chunk %q: %v", data, err)
	}
	if len(c.Choices) == 0 || c.Choices[0].Delta.Content == nil {
		return ""
	}
	return *c.Choices[0].Delta.Content
}

var chat = map[string]any{"model": testenv.Model, "messages": []any{map[string]any{"role": "user", "content": "Tell me a story"}},
	"max_tokens": 64, "seed": 3, "stream": true}

// The first streamed token reaches the client while generation is held after that token:
// it was sent as soon as it was drawn, not after the generation ended.
func TestFirstTokenArrivesBeforeGenerationEnds(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	g := newGated(t, cfg)
	s, _ := start(t, nil, g)
	resp := open(t, context.Background(), s, "/oai/api/v1/chat/completions", testenv.KeyA, chat)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	ev := &events{bufio.NewScanner(resp.Body)}
	if role := ev.next(t); !strings.Contains(role, `"role":"assistant"`) {
		t.Fatalf("first chunk %s", role)
	}
	first := ""
	for first == "" {
		first = chunkText(t, ev.next(t))
	}
	// The gating token's chunk is handed to the writer before the gate marks it hit, so a
	// loaded machine may deliver it first: wait briefly rather than poll once.
	select {
	case <-g.hit:
	case <-time.After(5 * time.Second):
		t.Fatal("a content chunk arrived but the engine never reported the gating token")
	}
	select {
	case err := <-g.done:
		t.Fatalf("generation ended (%v) before the first chunk was read: it was not streamed", err)
	default:
	}
	close(g.gate)
	n, text := 1, first
	for {
		d := ev.next(t)
		if d == "[DONE]" {
			break
		}
		if s := chunkText(t, d); s != "" {
			n++
			text += s
		}
	}
	if err := <-g.done; err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("%d content chunks: the rest came at once", n)
	}
	// The streamed text is the whole response's text for the same seed.
	whole := map[string]any{}
	for k, v := range chat {
		whole[k] = v
	}
	delete(whole, "stream")
	_, body := post(t, s, "/oai/api/v1/chat/completions", testenv.KeyA, whole)
	var r struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &r); err != nil || len(r.Choices) != 1 {
		t.Fatalf("%s: %v", body, err)
	}
	if r.Choices[0].Message.Content != text {
		t.Fatalf("streamed %q, whole %q", text, r.Choices[0].Message.Content)
	}
}

// A client that goes away mid-stream stops the generation.
func TestDisconnectCancelsGeneration(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	g := newGated(t, cfg)
	s, _ := start(t, nil, g)
	ctx, cancel := context.WithCancel(context.Background())
	resp := open(t, ctx, s, "/oai/api/v1/chat/completions", testenv.KeyA, map[string]any{
		"model": testenv.Model, "messages": []any{map[string]any{"role": "user", "content": "Hi"}}, "max_tokens": 1000, "stream": true})
	ev := &events{bufio.NewScanner(resp.Body)}
	for chunkText(t, ev.next(t)) == "" {
	}
	cancel()
	resp.Body.Close()
	select {
	case err := <-g.done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("generation ended with %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the generation went on after the client left")
	}
}

// OpenAI requests count against the tenant's queue limit together with Tinker sampling:
// both go through the same futures pool.
func TestSharedQueueLimit(t *testing.T) {
	t.Parallel()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	g := newGated(t, cfg)
	s, _ := start(t, func(c *config.Config) { c.Limits.MaxQueuedPerTenant = 1 }, g)
	resp := open(t, context.Background(), s, "/oai/api/v1/chat/completions", testenv.KeyA, chat)
	defer resp.Body.Close()
	<-g.hit // the stream holds the tenant's only slot
	r, body := post(t, s, "/oai/api/v1/completions", testenv.KeyA, map[string]any{"model": testenv.Model, "prompt": "Hi"})
	var e struct {
		Error struct{ Type, Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	if r.StatusCode != 429 || r.Header.Get("Retry-After") == "" || e.Error.Code != "rate_limit_exceeded" || !strings.Contains(e.Error.Message, "1") {
		t.Fatalf("second request: %d %s (Retry-After %q)", r.StatusCode, body, r.Header.Get("Retry-After"))
	}
	c := testenv.NewClient(t, s.URL(), testenv.KeyA)
	tr := c.Do("POST", "/api/v1/asample", map[string]any{"base_model": testenv.Model, "seq_id": 0, "num_samples": 1,
		"prompt":          map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": []int{1, 2}}}},
		"sampling_params": map[string]any{"max_tokens": 2}}, nil)
	if tr.Status != 429 {
		t.Fatalf("Tinker asample beside a held OpenAI stream: %d %s, want 429", tr.Status, tr.Body)
	}
	close(g.gate)
	// The limit is the tenant's own: another tenant's request is queued, not refused (it
	// runs once the model is free: today's executor samples one request at a time).
	if r, body := post(t, s, "/oai/api/v1/completions", testenv.KeyB, map[string]any{"model": testenv.Model, "prompt": "Hi", "max_tokens": 2}); r.StatusCode != 200 {
		t.Fatalf("tenant b: %d %s", r.StatusCode, body)
	}
}

// trainCheckpoint trains a LoRA adapter a few steps through the Tinker routes and saves
// it for sampling; it returns the tinker:// path.
func trainCheckpoint(t *testing.T, c *testenv.Client, name string) string {
	se := c.NewSession()
	modelID := c.NewTrainingRun(se, map[string]any{"rank": 4, "seed": 1})
	toks := make([]int, 24)
	for i := range toks {
		toks[i] = 10 + i
	}
	datum := map[string]any{"model_input": map[string]any{"chunks": []any{map[string]any{"type": "encoded_text", "tokens": toks[:23]}}},
		"loss_fn_inputs": map[string]any{"target_tokens": map[string]any{"data": toks[1:], "dtype": "int64"}}}
	var x struct {
		RequestID string `json:"request_id"`
	}
	seq := 1
	for range 3 {
		c.Post("/api/v1/forward_backward", map[string]any{"model_id": modelID, "seq_id": seq, "forward_backward_input": map[string]any{"data": []any{datum}, "loss_fn": "cross_entropy"}}, &x)
		c.Result(x.RequestID, nil)
		c.Post("/api/v1/optim_step", map[string]any{"model_id": modelID, "seq_id": seq + 1, "adam_params": map[string]any{"learning_rate": 0.02}}, &x)
		c.Result(x.RequestID, nil)
		seq += 2
	}
	c.Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": modelID, "seq_id": seq, "path": name}, &x)
	var saved struct{ Path string }
	c.Result(x.RequestID, &saved)
	return saved.Path
}

type completionResp struct {
	Model   string `json:"model"`
	Choices []struct {
		Text     string `json:"text"`
		Logprobs struct {
			TokenLogprobs []float64 `json:"token_logprobs"`
		} `json:"logprobs"`
	} `json:"choices"`
	Error *struct{ Type, Code, Param, Message string } `json:"error"`
}

func complete(t *testing.T, s *server.Server, key, model string) (int, completionResp) {
	t.Helper()
	r, body := post(t, s, "/oai/api/v1/completions", key, map[string]any{"model": model, "prompt": []int{10, 11, 12, 13, 14, 15},
		"max_tokens": 3, "temperature": 0, "logprobs": 0})
	var out completionResp
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return r.StatusCode, out
}

func TestCheckpointsTenantsAndAdapterCache(t *testing.T) {
	s, cfg := start(t, func(c *config.Config) { c.Inference.MaxAdapters = 1 }, nil)
	a := testenv.NewClient(t, s.URL(), testenv.KeyA)
	p1, p2 := trainCheckpoint(t, a, "one"), trainCheckpoint(t, a, "two")

	var list struct {
		Data []struct{ ID, OwnedBy string } `json:"data"`
	}
	a.Do("GET", "/oai/api/v1/models", nil, nil).JSON(t, &list)
	ids := map[string]bool{}
	for _, m := range list.Data {
		ids[m.ID] = true
	}
	if !ids[testenv.Model] || !ids[p1] || !ids[p2] {
		t.Fatalf("models %+v, want %s, %s and %s", list.Data, testenv.Model, p1, p2)
	}
	b := testenv.NewClient(t, s.URL(), testenv.KeyB)
	b.Do("GET", "/oai/api/v1/models", nil, nil).JSON(t, &list)
	if len(list.Data) != 1 {
		t.Fatalf("tenant b sees %+v", list.Data)
	}

	st, base := complete(t, s, testenv.KeyA, testenv.Model)
	if st != 200 {
		t.Fatalf("base: %d %+v", st, base.Error)
	}
	for _, p := range []string{p1, p2, p1, testenv.Model + ";" + p2} {
		st, out := complete(t, s, testenv.KeyA, p)
		if st != 200 || out.Model != p {
			t.Fatalf("%s: %d %+v", p, st, out.Error)
		}
		if equal(out.Choices[0].Logprobs.TokenLogprobs, base.Choices[0].Logprobs.TokenLogprobs) {
			t.Fatalf("%s samples like the base model: the adapter was not applied", p)
		}
		if n := s.Service.LoadedInferenceAdapters(); n != 1 {
			t.Fatalf("%d adapters loaded, inference.max_adapters is 1", n)
		}
	}
	// A checkpoint written again is loaded again (its files changed).
	dir := filepath.Join(cfg.CheckpointDir)
	var adapter string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, _ error) error {
		if fi != nil && fi.Name() == "adapter_model.safetensors" && strings.Contains(p, "one") {
			adapter = p
		}
		return nil
	})
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(adapter, later, later); err != nil {
		t.Fatal(err)
	}
	if st, out := complete(t, s, testenv.KeyA, p1); st != 200 {
		t.Fatalf("rewritten checkpoint: %d %+v", st, out.Error)
	}

	// Another tenant's checkpoint answers exactly like one that does not exist.
	missing := strings.Replace(p1, "/one", "/nothing", 1)
	stB, outB := complete(t, s, testenv.KeyB, p1)
	stM, outM := complete(t, s, testenv.KeyA, missing)
	if stB != 404 || stM != 404 || outB.Error == nil || outM.Error == nil || outB.Error.Code != "model_not_found" ||
		outB.Error.Code != outM.Error.Code || outB.Error.Param != "model" {
		t.Fatalf("other tenant's: %d %+v; missing: %d %+v", stB, outB.Error, stM, outM.Error)
	}
	if st, out := complete(t, s, testenv.KeyA, "other/base;"+p1); st != 404 {
		t.Fatalf("unknown base with a checkpoint: %d %+v", st, out.Error)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAnthropicMessages(t *testing.T) {
	t.Parallel()
	s, _ := start(t, nil, nil)
	msgs := []any{map[string]any{"role": "user", "content": "Hello"}, map[string]any{"role": "assistant", "content": "Sure:"}}
	var count struct {
		InputTokens int `json:"input_tokens"`
	}
	r, body := post(t, s, "/anthropic/api/v1/messages/count_tokens", testenv.KeyA, map[string]any{"model": testenv.Model, "messages": msgs, "system": "Be brief."})
	if r.StatusCode != 200 || json.Unmarshal(body, &count) != nil || count.InputTokens == 0 {
		t.Fatalf("count_tokens: %d %s", r.StatusCode, body)
	}
	r, body = post(t, s, "/anthropic/api/v1/messages", testenv.KeyA, map[string]any{"model": testenv.Model, "messages": msgs,
		"system": []any{map[string]any{"type": "text", "text": "Be brief."}}, "max_tokens": 8, "temperature": 0})
	var m struct {
		Type, Role, StopReason string
		Content                []struct{ Type, Text string }
		Usage                  struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
	}
	if r.StatusCode != 200 || json.Unmarshal(body, &m) != nil {
		t.Fatalf("messages: %d %s", r.StatusCode, body)
	}
	if m.Type != "message" || m.Role != "assistant" || len(m.Content) != 1 || m.Usage.InputTokens != count.InputTokens || m.Usage.OutputTokens == 0 {
		t.Fatalf("message %+v (count_tokens said %d)", m, count.InputTokens)
	}
	r, body = post(t, s, "/anthropic/api/v1/messages", testenv.KeyA, map[string]any{"model": "nope", "messages": msgs, "max_tokens": 8})
	if r.StatusCode != 404 || !strings.Contains(string(body), `"type":"not_found_error"`) {
		t.Fatalf("unknown model: %d %s", r.StatusCode, body)
	}
	r, body = post(t, s, "/anthropic/api/v1/messages", testenv.KeyA, map[string]any{"model": testenv.Model, "messages": msgs})
	if r.StatusCode != 400 || !strings.Contains(string(body), "max_tokens") {
		t.Fatalf("without max_tokens: %d %s", r.StatusCode, body)
	}
	req, _ := http.NewRequest("POST", s.URL()+"/anthropic/api/v1/messages", strings.NewReader(`{}`))
	req.Header.Set("x-api-key", "tml-wrong")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("bad key: %d", resp.StatusCode)
	}
}

// A model hosted by a `tuft worker` streams too: the worker hands over its tokenizer and
// chat template, and its SampleStream RPC carries the tokens as they are drawn.
func TestRemoteWorkerModel(t *testing.T) {
	t.Parallel()
	cfg := testenv.Config(t, t.TempDir(), "memory")
	models, infos, err := backend.LoadModels(cfg, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	const token = "worker-token-for-tests"
	addr, _ := testenv.ServeWorker(t, backend.NewLocal(models, infos), worker.ServerOptions{Token: token})
	rem, err := backend.DialRemote(context.Background(), addr, backend.RemoteOptions{CallTimeout: config.Default("").Workers.CallTimeoutSeconds.Duration(), Token: token})
	if err != nil {
		t.Fatal(err)
	}
	router := backend.NewRouter()
	router.Set("worker", rem)
	s, _ := start(t, nil, router)

	req := map[string]any{"model": testenv.Model, "messages": []any{map[string]any{"role": "user", "content": "Hello"}},
		"max_tokens": 12, "seed": 5, "logprobs": true, "top_logprobs": 2}
	resp := open(t, context.Background(), s, "/oai/api/v1/chat/completions", testenv.KeyA, merge(req, map[string]any{"stream": true}))
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	ev := &events{bufio.NewScanner(resp.Body)}
	text, chunks := "", 0
	for d := ev.next(t); d != "[DONE]"; d = ev.next(t) {
		if s := chunkText(t, d); s != "" {
			text += s
			chunks++
		}
	}
	r, body := post(t, s, "/oai/api/v1/chat/completions", testenv.KeyA, req)
	var whole struct {
		Choices []struct {
			Message  struct{ Content string } `json:"message"`
			Logprobs struct {
				Content []struct {
					TopLogprobs []any `json:"top_logprobs"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if r.StatusCode != 200 || json.Unmarshal(body, &whole) != nil || len(whole.Choices) != 1 {
		t.Fatalf("whole: %d %s", r.StatusCode, body)
	}
	if whole.Choices[0].Message.Content != text || chunks < 2 {
		t.Fatalf("streamed %q in %d chunks, whole %q", text, chunks, whole.Choices[0].Message.Content)
	}
	if lp := whole.Choices[0].Logprobs.Content; len(lp) == 0 || len(lp[0].TopLogprobs) != 2 {
		t.Fatalf("top logprobs over the worker: %+v", lp)
	}
}

func merge(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
