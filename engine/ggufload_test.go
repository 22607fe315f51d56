package engine

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/engine/gguf"
)

// testGGUF encodes a GGUF v3 file for tests: metadata in order, F32 tensors.
type testGGUF struct {
	kv      []ggufKV
	tensors []ggufTensor
}

type ggufKV struct {
	key string
	val any // uint32, float32, bool, string, []string, []int32, []float32
}

type ggufTensor struct {
	name string
	dims []uint64 // innermost first
	data []float32
	typ  gguf.TensorType // with raw: the tensor's blocks as stored (F32 data otherwise)
	raw  []byte
}

func (g *testGGUF) set(key string, val any) { g.kv = append(g.kv, ggufKV{key, val}) }

func (g *testGGUF) add(name string, data []float32, shape ...int) {
	dims := make([]uint64, len(shape))
	for i, s := range shape {
		dims[len(shape)-1-i] = uint64(s)
	}
	g.tensors = append(g.tensors, ggufTensor{name: name, dims: dims, data: data})
}

func (g *testGGUF) bytes() []byte {
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	str := func(s string) { le(uint64(len(s))); b.WriteString(s) }
	b.WriteString("GGUF")
	le(uint32(3))
	le(uint64(len(g.tensors)))
	le(uint64(len(g.kv)))
	for _, kv := range g.kv {
		str(kv.key)
		switch v := kv.val.(type) {
		case uint32:
			le(uint32(gguf.TypeUint32))
			le(v)
		case float32:
			le(uint32(gguf.TypeFloat32))
			le(v)
		case bool:
			le(uint32(gguf.TypeBool))
			le(v)
		case string:
			le(uint32(gguf.TypeString))
			str(v)
		case []string:
			le(uint32(gguf.TypeArray))
			le(uint32(gguf.TypeString))
			le(uint64(len(v)))
			for _, s := range v {
				str(s)
			}
		case []int32:
			le(uint32(gguf.TypeArray))
			le(uint32(gguf.TypeInt32))
			le(uint64(len(v)))
			le(v)
		case []float32:
			le(uint32(gguf.TypeArray))
			le(uint32(gguf.TypeFloat32))
			le(uint64(len(v)))
			le(v)
		default:
			panic(kv.key)
		}
	}
	off := uint64(0)
	for _, t := range g.tensors {
		str(t.name)
		le(uint32(len(t.dims)))
		le(t.dims)
		size := uint64(len(t.data)) * 4
		if t.raw != nil {
			le(uint32(t.typ))
			size = uint64(len(t.raw))
		} else {
			le(uint32(gguf.F32))
		}
		le(off)
		off += (size + 31) / 32 * 32
	}
	for b.Len()%32 != 0 {
		b.WriteByte(0)
	}
	for _, t := range g.tensors {
		if t.raw != nil {
			b.Write(t.raw)
		} else {
			le(t.data)
		}
		for b.Len()%32 != 0 {
			b.WriteByte(0)
		}
	}
	return b.Bytes()
}

// permuteRotary is llama.cpp's converter's reordering of q/k rows: within each head, HF
// row s·hd/2+j moves to row 2j+s.
func permuteRotary(w []float32, heads, hd, cols int) []float32 {
	out := make([]float32, len(w))
	for h := 0; h < heads; h++ {
		for s := 0; s < 2; s++ {
			for j := 0; j < hd/2; j++ {
				copy(out[(h*hd+2*j+s)*cols:][:cols], w[(h*hd+s*hd/2+j)*cols:][:cols])
			}
		}
	}
	return out
}

// ggufFromModel writes m as llama.cpp's converter would: its names, q/k rows permuted for
// llama, the tokenizer as tokens, types and merges.
func ggufFromModel(t testing.TB, m *Model, tokJSON []byte) *testGGUF {
	t.Helper()
	c := m.Cfg
	a := c.Arch
	g := &testGGUF{}
	g.set("general.architecture", a)
	g.set(a+".block_count", uint32(c.Layers))
	g.set(a+".context_length", uint32(c.MaxPositions))
	g.set(a+".embedding_length", uint32(c.Hidden))
	g.set(a+".feed_forward_length", uint32(c.Intermediate))
	g.set(a+".attention.head_count", uint32(c.Heads))
	g.set(a+".attention.head_count_kv", uint32(c.KVHeads))
	g.set(a+".rope.freq_base", float32(c.RopeTheta))
	g.set(a+".attention.layer_norm_rms_epsilon", float32(c.RMSNormEps))
	var tj struct {
		Added []struct {
			ID      int32  `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
		Model struct {
			Vocab  map[string]int32 `json:"vocab"`
			Merges []string         `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(tokJSON, &tj); err != nil {
		t.Fatal(err)
	}
	tokens := make([]string, c.VocabSize)
	types := make([]int32, c.VocabSize)
	for s, id := range tj.Model.Vocab {
		tokens[id], types[id] = s, 1
	}
	for _, ad := range tj.Added {
		types[ad.ID] = 3
	}
	g.set("tokenizer.ggml.model", "gpt2")
	g.set("tokenizer.ggml.pre", "default")
	g.set("tokenizer.ggml.tokens", tokens)
	g.set("tokenizer.ggml.token_type", types)
	g.set("tokenizer.ggml.merges", tj.Model.Merges)
	g.set("tokenizer.ggml.eos_token_id", uint32(c.EOSTokenIDs[0]))
	if len(c.EOSTokenIDs) > 1 {
		g.set("tokenizer.ggml.eot_token_id", uint32(c.EOSTokenIDs[1]))
	}
	g.set("tokenizer.ggml.add_bos_token", false)
	g.set("tokenizer.chat_template", m.ChatTemplate)
	D, I, V := c.Hidden, c.Intermediate, c.VocabSize
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	w := m.W
	g.add("token_embd.weight", w.Embed, V, D)
	g.add("output_norm.weight", w.FinalNorm, D)
	if !c.TieEmbeddings {
		g.add("output.weight", w.LMHead, V, D)
	}
	for i, l := range w.Layers {
		p := "blk." + itoa(i) + "."
		wq, wk := l.Wq, l.Wk
		if a == "llama" {
			wq, wk = permuteRotary(wq, c.Heads, c.HeadDim, D), permuteRotary(wk, c.KVHeads, c.HeadDim, D)
		}
		g.add(p+"attn_norm.weight", l.AttnNorm, D)
		g.add(p+"attn_q.weight", wq, q, D)
		g.add(p+"attn_k.weight", wk, kv, D)
		g.add(p+"attn_v.weight", l.Wv, kv, D)
		g.add(p+"attn_output.weight", l.Wo, D, q)
		if c.AttnBias {
			g.add(p+"attn_q.bias", l.Bq, q)
			g.add(p+"attn_k.bias", l.Bk, kv)
			g.add(p+"attn_v.bias", l.Bv, kv)
		}
		g.add(p+"ffn_norm.weight", l.MLPNorm, D)
		g.add(p+"ffn_gate.weight", l.Wgate, I, D)
		g.add(p+"ffn_up.weight", l.Wup, I, D)
		g.add(p+"ffn_down.weight", l.Wdown, D, I)
	}
	return g
}

func itoa(i int) string { return strconv.Itoa(i) }

// tinyGGUFSource loads the tiny preset as a HuggingFace directory; qwen2 gives it biases and
// that architecture.
func tinyGGUFSource(t testing.TB, arch string) (*Model, []byte) {
	t.Helper()
	dir := t.TempDir()
	if err := WritePreset("tiny", dir); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if arch == "qwen2" {
		c := m.Cfg
		c.Arch, c.AttnBias = "qwen2", true
		rng := rand.New(rand.NewPCG(1, 2))
		w := *m.W
		w.Layers = slices.Clone(w.Layers)
		rnd := func(n int) []float32 {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			return v
		}
		for i := range w.Layers {
			w.Layers[i].Bq, w.Layers[i].Bk, w.Layers[i].Bv = rnd(c.Heads*c.HeadDim), rnd(c.KVHeads*c.HeadDim), rnd(c.KVHeads*c.HeadDim)
		}
		tpl := m.ChatTemplate
		if m, err = NewModel("tiny", c, &w, m.Tok); err != nil {
			t.Fatal(err)
		}
		m.ChatTemplate = tpl
	}
	return m, tj
}

// TestGGUFRoundTripsTheModel: a model written as llama.cpp writes GGUF (its names, q/k
// rows permuted for llama, the vocabulary as tokens and merges) loads back to the same
// configuration, the same weights bit for bit, the same tokenizer and chat template.
func TestGGUFRoundTripsTheModel(t *testing.T) {
	for _, arch := range []string{"llama", "qwen2"} {
		t.Run(arch, func(t *testing.T) {
			src, tj := tinyGGUFSource(t, arch)
			path := filepath.Join(t.TempDir(), "m.gguf")
			if err := os.WriteFile(path, ggufFromModel(t, src, tj).bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := Load(path, "g")
			if err != nil {
				t.Fatal(err)
			}
			want := src.Cfg
			want.BOSTokenID = -1
			if !slices.Equal(m.Cfg.EOSTokenIDs, want.EOSTokenIDs) {
				t.Errorf("eos %v, want %v", m.Cfg.EOSTokenIDs, want.EOSTokenIDs)
			}
			got := m.Cfg
			got.EOSTokenIDs, want.EOSTokenIDs = nil, nil
			if gj, wj := toJSON(got), toJSON(want); gj != wj {
				t.Errorf("config\n got %s\nwant %s", gj, wj)
			}
			eq := func(name string, a, b []float32) {
				if !slices.Equal(a, b) {
					t.Errorf("%s differs from the source", name)
				}
			}
			eq("embed", m.W.Embed, src.W.Embed)
			eq("lm_head", m.W.LMHead, src.W.LMHead)
			for i := range m.W.Layers {
				a, b := m.W.Layers[i], src.W.Layers[i]
				eq("q", a.Wq, b.Wq)
				eq("k", a.Wk, b.Wk)
				eq("v", a.Wv, b.Wv)
				eq("o", a.Wo, b.Wo)
				eq("bq", a.Bq, b.Bq)
				eq("bk", a.Bk, b.Bk)
				eq("gate", a.Wgate, b.Wgate)
				eq("down", a.Wdown, b.Wdown)
			}
			if m.ChatTemplate != src.ChatTemplate || m.ChatTemplate == "" {
				t.Errorf("chat template %q", m.ChatTemplate)
			}
			for _, s := range []string{"Hello, world! 1234", "<|im_start|>user\nWhat is the capital of France?<|im_end|>", "中文 🎉"} {
				a, err := m.Tok.Encode(s)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := src.Tok.Encode(s)
				if !slices.Equal(a, b) {
					t.Errorf("Encode(%q) = %v, the HF tokenizer gives %v", s, a, b)
				}
				if m.Tok.Decode(a) != s {
					t.Errorf("Decode(Encode(%q)) = %q", s, m.Tok.Decode(a))
				}
			}
		})
	}
}

func toJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestGGUFBadFilesAreNamed: each broken file is refused with the key or tensor at fault.
func TestGGUFBadFilesAreNamed(t *testing.T) {
	src, tj := tinyGGUFSource(t, "llama")
	cases := []struct {
		name, want string
		edit       func(g *testGGUF)
		raw        func(b []byte) []byte
	}{
		{"missing key", `"llama.embedding_length" is missing`, func(g *testGGUF) { drop(g, "llama.embedding_length") }, nil},
		{"wrong key type", `"llama.block_count" is a string`, func(g *testGGUF) { setKV(g, "llama.block_count", "four") }, nil},
		{"architecture", `general.architecture "gpt2" is not supported`, func(g *testGGUF) { setKV(g, "general.architecture", "gpt2") }, nil},
		{"missing tensor", "tensor blk.2.ffn_up.weight is missing", func(g *testGGUF) { dropTensor(g, "blk.2.ffn_up.weight") }, nil},
		{"extra tensor", "unexpected tensor blk.9.extra.weight", func(g *testGGUF) { g.add("blk.9.extra.weight", make([]float32, 8), 8) }, nil},
		{"rope factors", "rope_freqs.weight", func(g *testGGUF) { g.add("rope_freqs.weight", make([]float32, 32), 32) }, nil},
		{"wrong shape", "tensor blk.0.attn_v.weight has shape [256 256]", func(g *testGGUF) {
			for i := range g.tensors {
				if g.tensors[i].name == "blk.0.attn_v.weight" {
					g.tensors[i].dims = []uint64{256, 256}
					g.tensors[i].data = make([]float32, 256*256)
				}
			}
		}, nil},
		{"tokenizer", `tokenizer.ggml.pre "mystery" is not supported`, func(g *testGGUF) { setKV(g, "tokenizer.ggml.pre", "mystery") }, nil},
		{"bad eos", "tokenizer.ggml.eos_token_id 99999 is outside the vocabulary", func(g *testGGUF) { setKV(g, "tokenizer.ggml.eos_token_id", uint32(99999)) }, nil},
		{"truncated", `tensor "blk.3.ffn_down.weight"`, nil, func(b []byte) []byte { return b[:len(b)-100] }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := ggufFromModel(t, src, tj)
			if c.edit != nil {
				c.edit(g)
			}
			b := g.bytes()
			if c.raw != nil {
				b = c.raw(b)
			}
			path := filepath.Join(t.TempDir(), "bad.gguf")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := Load(path, "bad")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to name %q", err, c.want)
			}
			if m != nil {
				t.Fatal("a model came back with the error")
			}
		})
	}
}

func drop(g *testGGUF, key string) {
	g.kv = slices.DeleteFunc(g.kv, func(kv ggufKV) bool { return kv.key == key })
}

func setKV(g *testGGUF, key string, v any) {
	for i := range g.kv {
		if g.kv[i].key == key {
			g.kv[i].val = v
		}
	}
}

func dropTensor(g *testGGUF, name string) {
	g.tensors = slices.DeleteFunc(g.tensors, func(t ggufTensor) bool { return t.name == name })
}

// TestUnpermuteInvertsPermute on a shape with several heads.
func TestUnpermuteInvertsPermute(t *testing.T) {
	w := make([]float32, 3*8*2)
	for i := range w {
		w[i] = float32(i)
	}
	if got := unpermuteRotary(permuteRotary(w, 3, 8, 2), 3, 8, 2); !slices.Equal(got, w) {
		t.Fatalf("%v", got)
	}
}

// TestGGUFImportWritesHF: `tuft model import`'s directory loads to the same weights,
// tokenizer and template as the GGUF file itself.
func TestGGUFImportWritesHF(t *testing.T) {
	src, tj := tinyGGUFSource(t, "qwen2")
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, ggufFromModel(t, src, tj).bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := ReadGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "hf")
	if err := g.WriteHF(dir, false); err != nil {
		t.Fatal(err)
	}
	if err := g.WriteHF(dir, false); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second import over the first: %v", err)
	}
	m, err := Load(dir, "hf")
	if err != nil {
		t.Fatal(err)
	}
	if toJSON(m.Cfg) != toJSON(g.Cfg) {
		t.Errorf("config\n got %s\nwant %s", toJSON(m.Cfg), toJSON(g.Cfg))
	}
	if !slices.Equal(m.W.Layers[1].Wq, src.W.Layers[1].Wq) || !slices.Equal(m.W.Layers[1].Bk, src.W.Layers[1].Bk) {
		t.Error("weights differ after import")
	}
	if m.ChatTemplate != src.ChatTemplate {
		t.Errorf("chat template %q", m.ChatTemplate)
	}
	ids, err := m.Tok.Encode("<|im_start|>user\nhi 123<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := src.Tok.Encode("<|im_start|>user\nhi 123<|im_end|>")
	if !slices.Equal(ids, want) {
		t.Errorf("tokens %v, want %v", ids, want)
	}
}

// FuzzGGUFModel: any file is converted or refused with an error, never a panic or an
// allocation sized by a count the file cannot back.
func FuzzGGUFModel(f *testing.F) {
	src, tj := tinyGGUFSource(f, "llama")
	g := ggufFromModel(f, src, tj)
	// Keep the seed small: one layer's worth of tensors and a short vocabulary.
	f.Add(g.bytes()[:4096])
	meta := &testGGUF{kv: g.kv}
	f.Add(meta.bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		gf, err := gguf.Read(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		_, _ = convertGGUF(gf)
	})
}
