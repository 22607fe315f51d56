package browser

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// A small WebDriver BiDi client (https://w3c.github.io/webdriver-bidi/), enough to drive
// Firefox, which speaks BiDi natively over a WebSocket and no longer speaks CDP: commands
// are JSON {id, method, params}, answered by {type: "success"|"error", id, ...}; events
// arrive as {type: "event", method, params}.

// bidiOrigin is the Origin header our WebSocket handshake sends (golang.org/x/net/websocket
// always sends one); Firefox refuses an Origin it was not told to allow
// (--remote-allow-origins), so it is passed on Firefox's command line.
const bidiOrigin = "http://127.0.0.1"

// firefoxPath finds Debian's firefox-esr (TUFT_FIREFOX overrides).
func firefoxPath(t *testing.T) string {
	t.Helper()
	return browserPath(t, "TUFT_FIREFOX", "firefox-esr", "firefox-esr", "firefox")
}

// logEntry is a log.entryAdded event: a console message or a JavaScript error.
type logEntry struct {
	Type   string `json:"type"`  // "console", "javascript"
	Level  string `json:"level"` // "debug", "info", "warn", "error"
	Text   string `json:"text"`
	Source struct {
		Context string `json:"context"`
	} `json:"source"`
}

type bidiReply struct {
	Type    string          `json:"type"`
	ID      *int64          `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   string          `json:"error"`
	Message string          `json:"message"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// firefox is one headless Firefox driven over BiDi, with one tab (context).
type firefox struct {
	ws      *websocket.Conn
	context string // the tab's browsing context id
	base    string

	wmu     sync.Mutex // one frame written at a time
	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan bidiReply
	logs    []logEntry
	closed  error // set when the reader stops

	stderr *lockedBuf
}

type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() < 1<<20 {
		l.b.Write(p)
	}
	return len(p), nil
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startFirefox starts headless Firefox on a fresh profile with the BiDi server on a free
// port, opens a session on it and subscribes to log entries; closed at cleanup.
func startFirefox(t *testing.T, bin, base string) *firefox {
	t.Helper()
	profile := t.TempDir()
	cmd := exec.Command(bin, "--headless", "--no-remote", "--profile", profile,
		"--remote-debugging-port", "0", "--remote-allow-origins", bidiOrigin, "about:blank")
	// Firefox reads MOZ_HEADLESS too; a display in the environment must not matter.
	cmd.Env = append(os.Environ(), "MOZ_HEADLESS=1")
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	ff := &firefox{base: base, pending: map[int64]chan bidiReply{}, stderr: &lockedBuf{}}
	cmd.Stdout = ff.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	// Firefox says where its BiDi server listens on stderr ("WebDriver BiDi listening on
	// ws://127.0.0.1:PORT"); the WebSocket endpoint is that URL + /session.
	wsURL := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(errPipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			ff.stderr.Write([]byte(line + "\n"))
			if _, u, ok := strings.Cut(line, "WebDriver BiDi listening on "); ok {
				select {
				case wsURL <- strings.TrimSpace(u):
				default:
				}
			}
		}
		io.Copy(ff.stderr, errPipe)
	}()
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		if ff.ws != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ff.call(ctx, "browser.close", map[string]any{}, nil) // the answer may never come: Firefox is gone
			cancel()
			ff.ws.Close()
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
		}
		if t.Failed() {
			t.Logf("firefox output (tail):\n%s", lastLines(ff.stderr.String(), 40))
		}
	})
	var u string
	select {
	case u = <-wsURL:
	case <-exited:
		t.Fatalf("%s exited before its BiDi server listened:\n%s", bin, ff.stderr.String())
	case <-time.After(90 * time.Second):
		t.Fatalf("%s: no BiDi server after 90s:\n%s", bin, ff.stderr.String())
	}
	ws, err := websocket.Dial(u+"/session", "", bidiOrigin)
	if err != nil {
		t.Fatalf("BiDi WebSocket %s/session: %v", u, err)
	}
	ws.MaxPayloadBytes = 64 << 20 // screenshots arrive as one base64 message
	ff.ws = ws
	go ff.read()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sess struct {
		Capabilities struct {
			BrowserName    string `json:"browserName"`
			BrowserVersion string `json:"browserVersion"`
		} `json:"capabilities"`
	}
	if err := ff.call(ctx, "session.new", map[string]any{"capabilities": map[string]any{}}, &sess); err != nil {
		t.Fatalf("session.new: %v", err)
	}
	t.Logf("WebDriver BiDi session on %s %s (%s)", sess.Capabilities.BrowserName, sess.Capabilities.BrowserVersion, u)
	if err := ff.call(ctx, "session.subscribe", map[string]any{"events": []string{"log.entryAdded"}}, nil); err != nil {
		t.Fatalf("session.subscribe log.entryAdded: %v", err)
	}
	var tree struct {
		Contexts []struct {
			Context string `json:"context"`
		} `json:"contexts"`
	}
	if err := ff.call(ctx, "browsingContext.getTree", map[string]any{"maxDepth": 0}, &tree); err != nil || len(tree.Contexts) == 0 {
		t.Fatalf("browsingContext.getTree: %v (%d contexts)", err, len(tree.Contexts))
	}
	ff.context = tree.Contexts[0].Context
	// The traps run before any page script of every document (as Chromium's
	// Page.addScriptToEvaluateOnNewDocument).
	if err := ff.call(ctx, "script.addPreloadScript", map[string]any{"functionDeclaration": "() => { " + traps + " }"}, nil); err != nil {
		t.Fatalf("script.addPreloadScript: %v", err)
	}
	ff.viewport(t, laptopW, laptopH)
	return ff
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// read delivers answers to their callers and keeps log entries, until the socket closes.
func (ff *firefox) read() {
	for {
		var msg []byte
		if err := websocket.Message.Receive(ff.ws, &msg); err != nil {
			ff.mu.Lock()
			ff.closed = fmt.Errorf("BiDi connection closed: %w", err)
			for id, ch := range ff.pending {
				close(ch)
				delete(ff.pending, id)
			}
			ff.mu.Unlock()
			return
		}
		var r bidiReply
		if err := json.Unmarshal(msg, &r); err != nil {
			continue
		}
		ff.mu.Lock()
		switch {
		case r.ID != nil:
			if ch, ok := ff.pending[*r.ID]; ok {
				ch <- r
				delete(ff.pending, *r.ID)
			}
		case r.Type == "event" && r.Method == "log.entryAdded":
			var e logEntry
			if json.Unmarshal(r.Params, &e) == nil {
				ff.logs = append(ff.logs, e)
			}
		}
		ff.mu.Unlock()
	}
}

// call sends a command and decodes its result into out (when not nil).
func (ff *firefox) call(ctx context.Context, method string, params any, out any) error {
	ch := make(chan bidiReply, 1)
	ff.mu.Lock()
	if ff.closed != nil {
		ff.mu.Unlock()
		return ff.closed
	}
	ff.nextID++
	id := ff.nextID
	ff.pending[id] = ch
	ff.mu.Unlock()
	msg, err := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err != nil {
		return err
	}
	ff.wmu.Lock()
	err = websocket.Message.Send(ff.ws, string(msg))
	ff.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return fmt.Errorf("%s: %w", method, ff.closed)
		}
		if r.Type == "error" {
			return fmt.Errorf("%s: %s: %s", method, r.Error, r.Message)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-ctx.Done():
		ff.mu.Lock()
		delete(ff.pending, id)
		ff.mu.Unlock()
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// do is call with a timeout, failing the test on error.
func (ff *firefox) do(t *testing.T, method string, params any, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ff.call(ctx, method, params, out); err != nil {
		t.Fatalf("firefox: %v", err)
	}
}

// logCount is how many log entries arrived so far (a mark for logsSince).
func (ff *firefox) logCount() int {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	return len(ff.logs)
}

func (ff *firefox) logsSince(n int) []logEntry {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	return append([]logEntry(nil), ff.logs[n:]...)
}

// open navigates the tab to a console path and waits for the document to load.
func (ff *firefox) open(t *testing.T, path string) {
	t.Helper()
	ff.do(t, "browsingContext.navigate", map[string]any{"context": ff.context, "url": ff.base + path, "wait": "complete"}, nil)
}

// evalErr evaluates a JavaScript expression in the page (a promise is awaited) and
// decodes its value, passed through JSON.stringify, into out.
func (ff *firefox) evalErr(js string, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res struct {
		Type   string `json:"type"` // "success", "exception"
		Result struct {
			Type  string `json:"type"`
			Value any    `json:"value"`
		} `json:"result"`
		ExceptionDetails struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	err := ff.call(ctx, "script.evaluate", map[string]any{
		"expression":      "(async () => JSON.stringify(await (" + js + ")))()",
		"target":          map[string]any{"context": ff.context},
		"awaitPromise":    true,
		"resultOwnership": "none",
	}, &res)
	if err != nil {
		return err
	}
	if res.Type == "exception" {
		return fmt.Errorf("exception: %s", res.ExceptionDetails.Text)
	}
	s, ok := res.Result.Value.(string)
	if res.Result.Type != "string" || !ok {
		s = "null" // undefined
	}
	return json.Unmarshal([]byte(s), out)
}

// ffEval evaluates js in the tab into T, failing the test on error.
func ffEval[T any](t *testing.T, ff *firefox, js string) T {
	t.Helper()
	var v T
	if err := ff.evalErr(js, &v); err != nil {
		t.Fatalf("firefox: evaluate %s: %v", js, err)
	}
	return v
}

// wait polls a JavaScript condition until it holds; fails naming what after timeout.
func (ff *firefox) wait(t *testing.T, what, cond string, timeout time.Duration) {
	t.Helper()
	js := condJS(cond)
	waitFor(t, "firefox", what, timeout, func() (bool, error) {
		var ok bool
		err := ff.evalErr(js, &ok) // fails while a navigation replaces the document
		return ok, err
	})
}

// click clicks the centre of the element sel with the mouse (input.performActions), as
// a person would: the browser's own hit testing and event dispatch.
func (ff *firefox) click(t *testing.T, sel string) {
	t.Helper()
	xy := ffEval[[]float64](t, ff, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return null;
	  e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();
	  return [r.left + r.width / 2, r.top + r.height / 2]; })()`, sel))
	if len(xy) != 2 {
		t.Fatalf("firefox: no %s to click", sel)
	}
	ff.do(t, "input.performActions", map[string]any{"context": ff.context, "actions": []any{map[string]any{
		"type": "pointer", "id": "mouse", "parameters": map[string]any{"pointerType": "mouse"},
		"actions": []any{
			map[string]any{"type": "pointerMove", "x": int(math.Round(xy[0])), "y": int(math.Round(xy[1]))},
			map[string]any{"type": "pointerDown", "button": 0},
			map[string]any{"type": "pointerUp", "button": 0},
		},
	}}}, nil)
}

// typeText clicks into sel and types text with the keyboard.
func (ff *firefox) typeText(t *testing.T, sel, text string) {
	t.Helper()
	ff.click(t, sel)
	var keys []any
	for _, r := range text {
		keys = append(keys, map[string]any{"type": "keyDown", "value": string(r)}, map[string]any{"type": "keyUp", "value": string(r)})
	}
	ff.do(t, "input.performActions", map[string]any{"context": ff.context, "actions": []any{map[string]any{
		"type": "key", "id": "keyboard", "actions": keys,
	}}}, nil)
}

// viewport sets the tab's viewport in CSS pixels (device pixel ratio 1).
func (ff *firefox) viewport(t *testing.T, w, h int) {
	t.Helper()
	ff.do(t, "browsingContext.setViewport", map[string]any{"context": ff.context,
		"viewport": map[string]any{"width": w, "height": h}, "devicePixelRatio": 1}, nil)
}

// screenshot captures the viewport as PNG bytes.
func (ff *firefox) screenshot() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res struct {
		Data string `json:"data"`
	}
	if err := ff.call(ctx, "browsingContext.captureScreenshot", map[string]any{"context": ff.context}, &res); err != nil {
		return nil, err
	}
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil {
		return nil, err
	}
	if len(png) == 0 {
		return nil, errors.New("empty screenshot")
	}
	return png, nil
}

// shot writes a screenshot of the viewport as name.png into dir.
func (ff *firefox) shot(t *testing.T, dir, name string) {
	t.Helper()
	ffEval[any](t, ff, `document.activeElement && document.activeElement.blur && document.activeElement.blur()`)
	png, err := ff.screenshot()
	if err != nil {
		t.Fatalf("firefox screenshot %s: %v", name, err)
	}
	if len(png) > maxShotBytes {
		t.Errorf("screenshot %s is %d bytes, over %d", name, len(png), maxShotBytes)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d KB)", path, len(png)>>10)
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o644) }
