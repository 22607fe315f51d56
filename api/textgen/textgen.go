// Package textgen is the part the OpenAI- and Anthropic-compatible routes share: it runs
// a text generation through the service (tokens in, tokens out) and turns the sampled
// tokens into text pieces the way those APIs define text: stop strings end the text and
// are not part of it, the end-of-sequence token has no text, and a streamed piece never
// ends inside a UTF-8 character or inside what may become a stop string. Streaming and
// whole responses go through the same code; only where the tokens come from differs.
package textgen

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/tokenizer"
	"github.com/tuft-go/tuft/service"
)

// Request is one generation: N samples of each prompt.
type Request struct {
	Target  *service.InferenceTarget
	Prompts [][]int32
	N       int
	Params  engine.SampleParams
	// Stop strings end a choice's text; the text is cut where the first one begins.
	Stop []string
	// TopLogprobs > 0 reports that many alternatives per token (needs a streaming
	// executor even for a whole response).
	TopLogprobs int
	// PromptLogprobs asks for the prompt tokens' logprobs (OpenAI's echo with logprobs);
	// PromptTopLogprobs for their alternatives too.
	PromptLogprobs    bool
	PromptTopLogprobs int
	// Stream delivers pieces while the tokens are drawn; otherwise after generation.
	Stream bool
}

// OutputSize is what the request asks the server to produce, and how it is named in a
// refusal.
func (r Request) OutputSize() (service.OutputSize, string) {
	lens := make([]int, len(r.Prompts))
	for i, p := range r.Prompts {
		lens[i] = len(p)
	}
	o := service.TextOutputSize(lens, r.N, r.Params.MaxTokens, r.TopLogprobs, r.PromptLogprobs, r.PromptTopLogprobs)
	return o, fmt.Sprintf("%d prompt(s) × n %d × max_tokens %d × (1 + top_logprobs %d)", len(r.Prompts), r.N, r.Params.MaxTokens, r.TopLogprobs)
}

// Token is one completion token with its logprob and alternatives.
type Token struct {
	ID      int32
	Text    string // the bytes the token adds to the text (possibly part of a UTF-8 character)
	Logprob float32
	Top     []Alt
	// Offset is where the token's text starts in the choice's text, in bytes.
	Offset int
}

// Alt is an alternative token at one position.
type Alt struct {
	ID      int32
	Text    string
	Logprob float32
}

// Piece is new output of one choice. Choices are numbered prompt×N + sample.
type Piece struct {
	Choice int
	Text   string
	Tokens []Token // the tokens whose text ends within this piece (or earlier)
	// Finish is set on a choice's last piece: "stop" (end-of-sequence token or stop
	// string) or "length".
	Finish string
	// StopSequence is the stop string that ended the choice, if one did.
	StopSequence string
}

// Summary describes a finished generation.
type Summary struct {
	RequestIDs       []string // the futures that ran it (one per prompt)
	PromptTokens     int
	CompletionTokens int
	// PromptLogprobs, per prompt, when asked for: NaN at position 0.
	PromptLogprobs [][]float32
	PromptTop      [][][]Alt
}

// Run generates and calls emit with each piece, on the caller's goroutine, in order per
// choice. An emit error (the client went away) cancels the generation and is returned.
func Run(ctx context.Context, svc *service.Service, tenant string, req Request, emit func(Piece) error) (Summary, error) {
	// The output budget, before anything is queued (service/output.go).
	if err := svc.CheckOutput(req.OutputSize()); err != nil {
		return Summary{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sum := Summary{RequestIDs: make([]string, len(req.Prompts))}
	states := make([]*choice, len(req.Prompts)*req.N)
	for i := range states {
		states[i] = &choice{idx: i, t: req.Target, stops: req.Stop}
	}
	for _, p := range req.Prompts {
		sum.PromptTokens += len(p)
	}
	streamed := req.Stream || req.TopLogprobs > 0
	q := &queue{wake: make(chan struct{}, 1)}
	results := make([]service.InferOutput, len(req.Prompts))
	var wg sync.WaitGroup
	for pi, prompt := range req.Prompts {
		in := service.InferInput{Target: req.Target, Req: engine.SampleRequest{Prompt: prompt, NumSamples: req.N, Params: req.Params,
			PromptLogprobs: req.PromptLogprobs, TopKPromptLogprobs: req.PromptTopLogprobs}}
		if streamed {
			in.Stream = &backend.Stream{TopLogprobs: req.TopLogprobs, OnToken: func(ev engine.TokenEvent) { q.push(item{prompt: pi, ev: ev}) }}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := svc.Infer(ctx, tenant, in)
			results[pi] = out
			q.finish(err)
		}()
	}
	// Pieces are emitted here, never on the sampling goroutine: a slow client must not
	// hold the model.
	var err error
	for pending := len(req.Prompts); pending > 0 && err == nil; {
		items, finished, ferr := q.take(ctx)
		pending -= finished
		if ferr != nil {
			err = ferr
			break
		}
		for _, it := range items {
			c := states[it.prompt*req.N+it.ev.Seq]
			if p, ok := c.add(it.ev); ok {
				if err = emit(p); err != nil {
					break
				}
			}
		}
	}
	if err != nil {
		cancel()
		wg.Wait()
		return sum, err
	}
	wg.Wait()
	for pi, out := range results {
		sum.RequestIDs[pi] = out.RequestID
		if req.PromptLogprobs {
			sum.PromptLogprobs = append(sum.PromptLogprobs, out.Result.PromptLogprobs)
			sum.PromptTop = append(sum.PromptTop, alts(req.Target, req.Prompts[pi], out.Result.TopKPrompt))
		}
		for si, sq := range out.Result.Sequences {
			c := states[pi*req.N+si]
			if !streamed {
				// A whole result: feed its tokens through the same path as a stream.
				for j, tok := range sq.Tokens {
					ev := engine.TokenEvent{Seq: si, Token: tok, Logprob: sq.Logprobs[j]}
					if j == len(sq.Tokens)-1 {
						ev.Stop = sq.StopReason
					}
					if p, ok := c.add(ev); ok {
						if err := emit(p); err != nil {
							return sum, err
						}
					}
				}
			}
			if !c.done {
				// The executor ended the sequence without saying why on its last token.
				c.finishAs(string(sq.StopReason))
				if err := emit(c.flush()); err != nil {
					return sum, err
				}
			}
			sum.CompletionTokens += c.ntok
		}
	}
	return sum, nil
}

// alts are the prompt's alternatives, each with the text it would add after the prompt's
// tokens before it.
func alts(t Codec, prompt []int32, top [][]engine.TokenLogprob) [][]Alt {
	out := make([][]Alt, len(top))
	text := tokenizer.NewStream(t)
	for i, row := range top {
		for _, tl := range row {
			out[i] = append(out[i], Alt{ID: tl.Token, Text: text.Peek(tl.Token), Logprob: tl.Logprob})
		}
		if i < len(prompt) {
			text.Next(prompt[i])
		}
	}
	return out
}

// item is a sampled token of one prompt's generation.
type item struct {
	prompt int
	ev     engine.TokenEvent
}

// queue hands tokens from the sampling goroutines to the emitting one without ever
// blocking the sampler (its size is bounded by the request's max_tokens × n).
type queue struct {
	mu       sync.Mutex
	items    []item
	finished int
	err      error
	wake     chan struct{}
}

func (q *queue) push(it item) {
	q.mu.Lock()
	q.items = append(q.items, it)
	q.mu.Unlock()
	q.signal()
}

func (q *queue) finish(err error) {
	q.mu.Lock()
	q.finished++
	if err != nil && q.err == nil {
		q.err = err
	}
	q.mu.Unlock()
	q.signal()
}

func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take waits for tokens or finished generations and returns what is there.
func (q *queue) take(ctx context.Context) ([]item, int, error) {
	for {
		q.mu.Lock()
		items, fin, err := q.items, q.finished, q.err
		q.items, q.finished = nil, 0
		q.mu.Unlock()
		if err != nil {
			return nil, fin, err
		}
		if len(items) > 0 || fin > 0 {
			return items, fin, nil
		}
		select {
		case <-q.wake:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// Codec is what the text pieces need of a model: decoding (a sequence's text is
// decoded token by token through a tokenizer.Stream, which keeps it as Decode of the
// whole sequence) and which token ends a sequence.
// *service.InferenceTarget is one.
type Codec interface {
	Decode(ids []int32) string
	IsEOS(id int32) bool
}

// choice turns one sequence's tokens into text pieces.
type choice struct {
	idx   int
	t     Codec
	text  *tokenizer.Stream // the tokens' text in context (a lone token's may differ); nil until the first
	stops []string

	buf     []byte  // the choice's text so far (cut at a stop string once found)
	sent    int     // bytes of buf already emitted
	pending []Token // tokens not yet emitted
	ntok    int
	started bool // a piece was returned
	done    bool
	finish  string
	stopSeq string
}

// add takes the next token and returns the piece it makes emittable, if any.
func (c *choice) add(ev engine.TokenEvent) (Piece, bool) {
	if c.done {
		return Piece{}, false
	}
	c.ntok++
	last := ev.Stop != ""
	// The end-of-sequence token closes the text; it is not part of it.
	if !(last && ev.Stop == engine.StopReasonStop && c.t.IsEOS(ev.Token)) {
		if c.text == nil {
			c.text = tokenizer.NewStream(c.t)
		}
		tok := Token{ID: ev.Token, Logprob: ev.Logprob, Offset: len(c.buf)}
		// The alternatives' texts in the same context as the token's, so before it.
		for _, tl := range ev.Top {
			tok.Top = append(tok.Top, Alt{ID: tl.Token, Text: c.text.Peek(tl.Token), Logprob: tl.Logprob})
		}
		tok.Text = c.text.Next(ev.Token)
		from := len(c.buf)
		c.buf = append(c.buf, tok.Text...)
		c.pending = append(c.pending, tok)
		if at, s := firstStop(c.buf, from, c.stops); at >= 0 {
			c.buf = c.buf[:at]
			c.stopSeq = s
			c.finishAs(string(engine.StopReasonStop))
		}
	}
	if last && !c.done {
		c.finishAs(string(ev.Stop))
	}
	if c.done {
		return c.flush(), true
	}
	limit := len(c.buf) - heldBack(c.buf, c.stops)
	limit = completeUTF8(c.buf[:limit])
	if limit <= c.sent {
		if !c.started {
			// The first token is drawn, though its text must wait: an empty piece opens
			// the response now (a stream's headers go out with the first token).
			c.started = true
			return Piece{Choice: c.idx}, true
		}
		return Piece{}, false
	}
	c.started = true
	p := Piece{Choice: c.idx, Text: string(c.buf[c.sent:limit])}
	c.sent = limit
	n := 0
	for n < len(c.pending) && c.pending[n].Offset+len(c.pending[n].Text) <= limit {
		n++
	}
	p.Tokens, c.pending = c.pending[:n:n], c.pending[n:]
	return p, true
}

func (c *choice) finishAs(reason string) {
	c.done = true
	c.finish = reason
}

// flush emits everything left: the rest of the text and the tokens that contributed to it.
func (c *choice) flush() Piece {
	p := Piece{Choice: c.idx, Text: string(c.buf[c.sent:]), Finish: c.finish, StopSequence: c.stopSeq}
	c.sent = len(c.buf)
	for _, t := range c.pending {
		if t.Offset < len(c.buf) || (t.Text == "" && t.Offset == len(c.buf)) {
			p.Tokens = append(p.Tokens, t)
		}
	}
	c.pending = nil
	return p
}

// firstStop finds the earliest stop string in b that ends after from (in the new bytes).
func firstStop(b []byte, from int, stops []string) (int, string) {
	at, which := -1, ""
	for _, s := range stops {
		if s == "" {
			continue
		}
		start := max(0, from-len(s)+1)
		if i := bytes.Index(b[start:], []byte(s)); i >= 0 && (at < 0 || start+i < at) {
			at, which = start+i, s
		}
	}
	return at, which
}

// heldBack is the length of the longest suffix of b that is a proper prefix of a stop
// string: text that must wait, since the next token may complete the stop string.
func heldBack(b []byte, stops []string) int {
	n := 0
	for _, s := range stops {
		for k := min(len(s)-1, len(b)); k > n; k-- {
			if bytes.HasSuffix(b, []byte(s[:k])) {
				n = k
				break
			}
		}
	}
	return n
}

// completeUTF8 is the length of b without a trailing incomplete UTF-8 character (up to
// three bytes that may still be completed by the next token).
func completeUTF8(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < 0x80 {
			return len(b) // ASCII: nothing pending
		}
		if c >= 0xC0 { // a leading byte: is its character complete?
			if !utf8.FullRune(b[len(b)-k:]) {
				return len(b) - k
			}
			return len(b)
		}
	}
	return len(b)
}

// Collected is a whole choice, gathered from its pieces.
type Collected struct {
	Text         strings.Builder
	Tokens       []Token
	Finish       string
	StopSequence string
}

// Collect gathers pieces into whole choices (for responses that are not streamed).
type Collect []Collected

// NewCollect makes room for n choices.
func NewCollect(n int) Collect { return make(Collect, n) }

// Add appends a piece to its choice.
func (c Collect) Add(p Piece) {
	ch := &c[p.Choice]
	ch.Text.WriteString(p.Text)
	ch.Tokens = append(ch.Tokens, p.Tokens...)
	if p.Finish != "" {
		ch.Finish, ch.StopSequence = p.Finish, p.StopSequence
	}
}

// FinishReasons lists each choice's finish reason, in choice order.
func (c Collect) FinishReasons() []string {
	out := make([]string, len(c))
	for i := range c {
		out[i] = c[i].Finish
	}
	return out
}
