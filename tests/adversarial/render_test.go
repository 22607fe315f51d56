package adversarial

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tuft-go/tuft/internal/testenv"
)

// Finding 3 of issue 22: chat-template rendering was quadratic and could not be
// cancelled. count_tokens with 10,000 two-byte messages took 4.7 s and 50,000 took
// 113 s; /chat/completions with 20,000 messages rendered for 23 s before answering
// context_length_exceeded; three such requests whose clients hung up kept the server
// busy for minutes, and another tenant's sample went from 0.04 s to 0.4–0.8 s.

// chatBody is a conversation of n user messages of content, for the chat routes (with
// max_tokens) or count_tokens (path countTokens: without).
func chatBody(path string, n int, content string) []byte {
	msgs := make([]map[string]string, n)
	for i := range msgs {
		msgs[i] = map[string]string{"role": "user", "content": content}
	}
	req := map[string]any{"model": testenv.Model, "messages": msgs}
	if path != countTokens {
		req["max_tokens"] = 4
	}
	b, _ := json.Marshal(req)
	return b
}

// postTimed sends body with key and waits at most timeout for the answer (then hangs up, as
// a client that gave up does): the status and body, or 0 on a timeout.
func postTimed(base, path, key string, body []byte, timeout time.Duration) (int, string, time.Duration) {
	req, _ := http.NewRequest("POST", base+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("X-API-Key", key)
	c := &http.Client{Timeout: timeout}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error(), time.Since(t0)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), time.Since(t0)
}

const (
	oaiChat     = "/oai/api/v1/chat/completions"
	countTokens = "/anthropic/api/v1/messages/count_tokens"
)

// Every render is bounded before it starts (limits.max_chat_messages and
// limits.max_chat_bytes, a 400 naming them), checked against the model's context while
// it runs (context_length_exceeded as soon as the prompt cannot fit), and answered in
// well under a second's work, on the chat and count_tokens routes alike.
func TestChatRenderIsBounded(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	cfg.Limits.MaxChatBytes = 1 << 20 // smaller bodies: the test times rendering, not JSON decoding
	s := testenv.Start(t, cfg)
	cases := []struct {
		name, path string
		body       []byte
		want       []string
	}{
		{"count_tokens, 50,000 messages", countTokens, chatBody(countTokens, 50000, "hi"), []string{"limits.max_chat_messages", "4096"}},
		{"chat, 20,000 messages", oaiChat, chatBody(oaiChat, 20000, "hi"), []string{"limits.max_chat_messages"}},
		{"chat, 2 MiB of content", oaiChat, chatBody(oaiChat, 1, strings.Repeat("x", 2<<20)), []string{"limits.max_chat_bytes", "1048576"}},
		{"count_tokens, 1.5 MiB of content", countTokens, chatBody(countTokens, 3, strings.Repeat("x", 1<<19)), []string{"limits.max_chat_bytes"}},
		// Within the bounds, but far longer than the tiny model's 2,048-token context.
		{"chat, 4,000 messages", oaiChat, chatBody(oaiChat, 4000, "hi"), []string{"context_length_exceeded"}},
		{"count_tokens, 4,000 messages", countTokens, chatBody(countTokens, 4000, "hi"), []string{"context"}},
		{"chat, a 768 KiB message", oaiChat, chatBody(oaiChat, 1, strings.Repeat("hello world ", 1<<16)), []string{"context_length_exceeded"}},
	}
	for _, c := range cases {
		st, body, d := postTimed(s.URL(), c.path, testenv.KeyA, c.body, 10*time.Second)
		t.Logf("%s: %d in %s", c.name, st, d)
		if st != http.StatusBadRequest || !contains(body, c.want...) {
			if len(body) > 300 {
				body = body[:300]
			}
			t.Fatalf("%s: %d %s in %s; want a 400 naming %v", c.name, st, body, d, c.want)
		}
		if d > 5*time.Second {
			t.Fatalf("%s: answered in %s", c.name, d)
		}
	}
	// A conversation that fits is still rendered and counted.
	st, body, _ := postTimed(s.URL(), countTokens, testenv.KeyA, chatBody(countTokens, 20, "hi"), 10*time.Second)
	if st != 200 || !strings.Contains(body, "input_tokens") {
		t.Fatalf("count_tokens of 20 messages: %d %s", st, body)
	}
}

// Three clients send huge conversations and hang up after 3 s, over and over (each
// sends its next request when the last was answered or given up, at most one every
// 3 s, a second apart from each other); the victim's 16-token sample stays within 2× of
// its idle latency, plus 150 ms for the race detector's decoding of the attack's bodies
// (a few hundred ms of JSON each under it, whatever happens after).
func TestVictimLatencyChatRender(t *testing.T) {
	cfg := testenv.Config(t, t.TempDir(), "memory")
	s := testenv.Start(t, cfg)
	victim := newTenant(t, s.URL(), testenv.KeyB)
	vsm := victim.sampler(victim.session(), 1, map[string]any{"base_model": testenv.Model})
	seq := 1
	sample := func() time.Duration {
		_, d := sampleTimed(victim, vsm, seq, tokens(7, 6), 16)
		seq++
		return d
	}
	sample() // warm up
	var idle []time.Duration
	for range 12 {
		idle = append(idle, sample())
	}
	// The cases: 20,000 messages to /chat/completions, 10,000 to count_tokens,
	// and 4,000 (within max_chat_messages, far past the context).
	bodies := []struct {
		path string
		body []byte
	}{{oaiChat, chatBody(oaiChat, 20000, "hi")}, {countTokens, chatBody(countTokens, 10000, "hi")}, {oaiChat, chatBody(oaiChat, 4000, "hi")}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered, hungUp := 0, 0
	for i, b := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(i) * time.Second):
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				st, _, _ := postTimed(s.URL(), b.path, testenv.KeyA, b.body, 3*time.Second)
				mu.Lock()
				if st == 0 {
					hungUp++
				} else {
					answered++
				}
				mu.Unlock()
				select {
				case <-stop:
					return
				case <-time.After(3*time.Second - time.Since(t0)):
				}
			}
		}()
	}
	// The victim's samples spread over about 6 s: two rounds of the attack.
	var attacked []time.Duration
	for range 12 {
		attacked = append(attacked, sample())
		time.Sleep(500 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("the attack: %d requests answered, %d hung up after 3 s", answered, hungUp)
	latencyReport(t, "chat render flood", idle, attacked, 150*time.Millisecond)
	if hungUp > 0 {
		t.Fatalf("%d of the attack's requests ran past 3 s", hungUp)
	}
}
