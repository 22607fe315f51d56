package textgen

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine"
)

// byteCodec decodes token i as vocab[i]; token 0 is the end of sequence.
type byteCodec []string

func (b byteCodec) Decode(ids []int32) string {
	var s strings.Builder
	for _, id := range ids {
		s.WriteString(b[id])
	}
	return s.String()
}

func (b byteCodec) IsEOS(id int32) bool { return id == 0 }

// The text pieces of a choice: what is emitted after each token, and how it ends.
func TestChoicePieces(t *testing.T) {
	t.Parallel()
	vocab := byteCodec{"<eos>", "Hello", " wor", "ld", "\n\n", "END", "\xc3", "\xa9", "!", "EN", "D more", "x"}
	type step struct {
		tok  int32
		stop engine.StopReason
		want string // text emitted after this token ("" = nothing)
	}
	cases := []struct {
		name       string
		stops      []string
		steps      []step
		finish     string
		stopSeq    string
		total      string
		tokenCount int // tokens reported for logprobs
	}{
		{name: "plain text streams token by token, the end-of-sequence token has no text",
			steps:  []step{{1, "", "Hello"}, {2, "", " wor"}, {3, "", "ld"}, {0, engine.StopReasonStop, ""}},
			finish: "stop", total: "Hello world", tokenCount: 3},
		{name: "length", steps: []step{{1, "", "Hello"}, {8, engine.StopReasonLength, "!"}},
			finish: "length", total: "Hello!", tokenCount: 2},
		{name: "a character split across tokens waits for its second byte",
			steps:  []step{{1, "", "Hello"}, {6, "", ""}, {7, "", "é"}, {8, engine.StopReasonLength, "!"}},
			finish: "length", total: "Helloé!", tokenCount: 4},
		{name: "a first token whose text waits still opens the response (with an empty piece)",
			steps:  []step{{6, "", ""}, {7, "", "é"}, {0, engine.StopReasonStop, ""}},
			finish: "stop", total: "é", tokenCount: 2},
		{name: "a stop string inside one token cuts the text before it",
			stops:  []string{"END"},
			steps:  []step{{1, "", "Hello"}, {5, engine.StopReasonStop, ""}},
			finish: "stop", stopSeq: "END", total: "Hello", tokenCount: 1},
		{name: "text that may begin a stop string is held back until it cannot",
			stops:  []string{"END"},
			steps:  []step{{1, "", "Hello"}, {9, "", ""}, {11, "", "ENx"}, {8, engine.StopReasonLength, "!"}},
			finish: "length", total: "HelloENx!", tokenCount: 4},
		{name: "a stop string across tokens; the text after it in the same token is dropped",
			stops:  []string{"END"},
			steps:  []step{{1, "", "Hello"}, {9, "", ""}, {10, engine.StopReasonStop, ""}},
			finish: "stop", stopSeq: "END", total: "Hello", tokenCount: 1}, // "EN" adds no text
		{name: "the earliest of several stop strings wins",
			stops:  []string{"ld", "\n\n"},
			steps:  []step{{1, "", "Hello"}, {2, "", " wor"}, {3, engine.StopReasonStop, ""}},
			finish: "stop", stopSeq: "ld", total: "Hello wor", tokenCount: 2},
		{name: "tokens after the end are ignored",
			steps:  []step{{1, engine.StopReasonLength, "Hello"}, {2, "", ""}},
			finish: "length", total: "Hello", tokenCount: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &choice{t: vocab, stops: tc.stops}
			var all Collect = NewCollect(1)
			for i, st := range tc.steps {
				p, ok := c.add(engine.TokenEvent{Token: st.tok, Logprob: -1, Stop: st.stop})
				if ok {
					all.Add(p)
				}
				if got := p.Text; got != st.want {
					t.Fatalf("step %d (token %q): emitted %q, want %q", i, vocab[st.tok], got, st.want)
				}
				if i == 0 && !ok {
					t.Fatal("the first token must yield a piece (empty if its text waits), to open the response")
				}
			}
			got := all[0]
			if got.Text.String() != tc.total || got.Finish != tc.finish || got.StopSequence != tc.stopSeq {
				t.Fatalf("text %q finish %q stop %q; want %q %q %q", got.Text.String(), got.Finish, got.StopSequence, tc.total, tc.finish, tc.stopSeq)
			}
			if len(got.Tokens) != tc.tokenCount {
				t.Fatalf("%d tokens reported, want %d", len(got.Tokens), tc.tokenCount)
			}
			off := 0
			for _, tok := range got.Tokens {
				if tok.Offset != off {
					t.Fatalf("token %q at offset %d, want %d", tok.Text, tok.Offset, off)
				}
				off += len(tok.Text)
			}
		})
	}
}

func TestHeldBackAndCompleteUTF8(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		b     string
		stops []string
		held  int
	}{
		{"abc", []string{"cd"}, 1},
		{"abc", []string{"bcd", "cx"}, 2},
		{"abc", []string{"x"}, 0},
		{"abc", nil, 0},
		{"ab", []string{"abc"}, 2},
	} {
		if got := heldBack([]byte(tc.b), tc.stops); got != tc.held {
			t.Errorf("heldBack(%q, %q) = %d, want %d", tc.b, tc.stops, got, tc.held)
		}
	}
	for _, tc := range []struct {
		b    string
		want int
	}{
		{"abc", 3}, {"a\xc3", 1}, {"a\xc3\xa9", 3}, {"\xe2\x82", 0}, {"\xe2\x82\xac", 3}, {"\xf0\x9f\x98", 0}, {"\x80\x80\x80\x80", 4},
	} {
		if got := completeUTF8([]byte(tc.b)); got != tc.want {
			t.Errorf("completeUTF8(%q) = %d, want %d", tc.b, got, tc.want)
		}
	}
}

func TestFieldRules(t *testing.T) {
	t.Parallel()
	rules := map[string]FieldRule{"a": Parsed, "b": Ignored, "c": DefaultOnly}
	for _, tc := range []struct {
		body    string
		field   string
		unknown bool
	}{
		{`{"a":1,"b":{"x":1}}`, "", false},
		{`{"c":null}`, "", false},
		{`{"c":0,"a":2}`, "", false},
		{`{"c":[]}`, "", false},
		{`{"c":{}}`, "", false},
		{`{"c":false}`, "", false},
		{`{"c":""}`, "", false},
		{`{"c":0.5}`, "c", false},
		{`{"c":[1]}`, "c", false},
		{`{"c":{"k":1}}`, "c", false},
		{`{"z":null,"c":1}`, "c", false}, // sorted: c comes first
		{`{"z":null}`, "z", true},
	} {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(tc.body), &raw); err != nil {
			t.Fatal(err)
		}
		f, unknown, ok := CheckFields(raw, rules)
		if ok != (tc.field == "") || f != tc.field || unknown != tc.unknown {
			t.Errorf("%s: got (%q, unknown %v, ok %v), want %q unknown %v", tc.body, f, unknown, ok, tc.field, tc.unknown)
		}
	}
}
