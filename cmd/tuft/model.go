package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/chat"
	"github.com/tuft-go/tuft/internal/cli"
)

func cmdModel(args []string) error {
	sub, args, err := verb(args, "init", "presets", "render", "import")
	if err != nil {
		return err
	}
	if sub == "render" {
		return cmdModelRender(args, os.Stdin, os.Stdout)
	}
	if sub == "import" {
		return cmdModelImport(args, os.Stdout)
	}
	if sub == "presets" {
		fs := cli.NewFlags("model presets", "tuft model presets", "List the built-in model presets.")
		if err := fs.ParseArgs(args); err != nil {
			return err
		}
		if err := fs.CheckArgs(0, 0); err != nil {
			return err
		}
		fmt.Println(strings.Join(engine.Presets(), "\n"))
		return nil
	}
	fs := cli.NewFlags("model init", "tuft model init --preset NAME --out DIR [--seed N]",
		"Write a built-in model (deterministic weights, tokenizer, config) in HuggingFace layout.")
	seed := fs.Uint64("seed", 0, "seed of the weights: the same seed writes the same bytes")
	preset := fs.String("preset", "tiny", "preset name ("+strings.Join(engine.Presets(), ", ")+")")
	out := fs.String("out", "", "output directory (HuggingFace layout)")
	if err := fs.ParseArgs(args); err != nil {
		return err
	}
	if err := fs.CheckArgs(0, 0); err != nil {
		return err
	}
	if *out == "" {
		return &cli.UsageError{Err: fmt.Errorf("--out is required"), Usage: fs.UsageText()}
	}
	if err := engine.WritePresetSeed(*preset, *out, *seed); err != nil {
		return err
	}
	fmt.Printf("wrote preset %s to %s\n", *preset, *out)
	return nil
}

// cmdModelImport converts a GGUF file into a HuggingFace-layout directory (what a
// models: entry's path may also name directly; the directory loads without the
// dequantisation and is what transformers and PEFT read).
func cmdModelImport(args []string, out io.Writer) error {
	fs := cli.NewFlags("model import", "tuft model import --out DIR [--dtype float32|bfloat16] FILE.gguf",
		"Convert a GGUF file (llama or qwen2; F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q4_K/Q5_K/Q6_K) into a HuggingFace-layout model directory: weights dequantised, llama.cpp's rotary row order undone, tokenizer.json and chat template from the metadata.")
	dst := fs.String("out", "", "output directory (must not exist)")
	dtype := fs.String("dtype", "float32", "weight type written: float32 (the dequantised values exactly) or bfloat16 (half the size)")
	if err := fs.ParseArgs(args); err != nil {
		return err
	}
	if err := fs.CheckArgs(1, 1); err != nil {
		return err
	}
	src := fs.Arg(0)
	if *dst == "" {
		return &cli.UsageError{Err: fmt.Errorf("--out is required"), Usage: fs.UsageText()}
	}
	if *dtype != "float32" && *dtype != "bfloat16" {
		return &cli.UsageError{Err: fmt.Errorf("--dtype %q must be float32 or bfloat16", *dtype), Usage: fs.UsageText()}
	}
	if !engine.IsGGUF(src) {
		return &cli.UsageError{Err: fmt.Errorf("%s is not a .gguf file (a HuggingFace directory needs no import: name it in models:)", src), Usage: fs.UsageText()}
	}
	g, err := engine.ReadGGUF(src)
	if err != nil {
		return err
	}
	if err := g.WriteHF(*dst, *dtype == "bfloat16"); err != nil {
		return err
	}
	c := g.Cfg
	fmt.Fprintf(out, "imported %s (%s, %d layers, hidden %d, vocabulary %d) to %s as %s\n", src, c.Arch, c.Layers, c.Hidden, c.VocabSize, *dst, *dtype)
	return nil
}

// renderOutput is what `tuft model render` prints: the prompt text the model's chat
// template makes of the messages, and its token ids as the server tokenizes it.
type renderOutput struct {
	Text   string  `json:"text"`
	Tokens []int32 `json:"tokens"`
}

// cmdModelRender renders a JSON list of {role, content} messages read from in with the
// chat template of a model directory and tokenizes the result, the way the server sees a
// chat prompt. It lets a client's own renderer be checked against the model, token for
// token (tests/cookbook does this for tinker-cookbook's renderers).
func cmdModelRender(args []string, in io.Reader, out io.Writer) error {
	fs := cli.NewFlags("model render", "tuft model render --model DIR|FILE.gguf [--generation-prompt] < messages.json",
		"Print a conversation (a JSON list of {role, content} on stdin) as the model's chat template and tokenizer render it: the text and its token ids.")
	dir := fs.String("model", "", "model directory (HuggingFace layout) or .gguf file")
	gen := fs.Bool("generation-prompt", false, "end with the header that opens an assistant turn")
	if err := fs.ParseArgs(args); err != nil {
		return err
	}
	if err := fs.CheckArgs(0, 0); err != nil {
		return err
	}
	if *dir == "" {
		return &cli.UsageError{Err: fmt.Errorf("--model is required"), Usage: fs.UsageText()}
	}
	var msgs []chat.Message
	dec := json.NewDecoder(in)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&msgs); err != nil {
		return fmt.Errorf("read messages (a JSON list of {\"role\", \"content\"}) from stdin: %w", err)
	}
	m, err := engine.Load(*dir, *dir)
	if err != nil {
		return err
	}
	if m.ChatTemplate == "" {
		return fmt.Errorf("model %s has no chat template", *dir)
	}
	if m.Tok == nil {
		return fmt.Errorf("model %s has no tokenizer.json", *dir)
	}
	tpl, err := chat.Parse(m.ChatTemplate)
	if err != nil {
		return err
	}
	bos, eos := specialTokens(*dir)
	if engine.IsGGUF(*dir) {
		// A GGUF file names its special tokens by id in its metadata.
		if id := m.Cfg.BOSTokenID; id >= 0 {
			bos = m.Tok.Decode([]int32{id})
		}
		if len(m.Cfg.EOSTokenIDs) > 0 {
			eos = m.Tok.Decode(m.Cfg.EOSTokenIDs[:1])
		}
	}
	// The operator's own file: no request limits apply.
	text, err := tpl.Render(context.Background(), msgs, chat.Options{AddGenerationPrompt: *gen, BosToken: bos, EosToken: eos})
	if err != nil {
		return err
	}
	toks, err := m.Tok.Encode(text)
	if err != nil {
		return fmt.Errorf("tokenize the rendered prompt: %w", err)
	}
	return json.NewEncoder(out).Encode(renderOutput{Text: text, Tokens: toks})
}

// specialTokens reads bos_token and eos_token from tokenizer_config.json, as transformers
// passes them to chat templates: a string, or an object with "content"; "" when absent.
func specialTokens(dir string) (bos, eos string) {
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return "", ""
	}
	var tc struct{ BosToken, EosToken json.RawMessage }
	if json.Unmarshal(b, &tc) != nil {
		return "", ""
	}
	str := func(raw json.RawMessage) string {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		var o struct{ Content string }
		if json.Unmarshal(raw, &o) == nil {
			return o.Content
		}
		return ""
	}
	return str(tc.BosToken), str(tc.EosToken)
}
