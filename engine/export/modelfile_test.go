package export

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv/check"
)

// The Modelfile for each template family the exporter translates, and for one it does
// not, against golden files (go test ./engine/export -run Modelfile -update rewrites them).
func TestModelfileGolden(t *testing.T) {
	smol := `{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`
	llama3 := `{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}`
	cases := []struct {
		name, from, adapter, tmpl string
		stops                     []string
	}{
		{"chatml_smollm2", "model-q8_0.gguf", "", smol, []string{"<|im_end|>"}},
		{"chatml_lora", "base-f16.gguf", "adapter.gguf", `{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n'}}{% endfor %}`, []string{"<|endoftext|>", "<|im_end|>"}},
		{"llama3", "model-bf16.gguf", "", llama3, []string{"<|eot_id|>"}},
		{"chatml_raw_newline", "model-f16.gguf", "", strings.ReplaceAll(smol, `\n`, "\n"), []string{"<|im_end|>"}},
		{"unknown", "model-f16.gguf", "", "{{ messages[0]['content'] }}", nil},
	}
	for _, c := range cases {
		got := Modelfile(c.from, c.adapter, c.tmpl, c.stops)
		path := filepath.Join("testdata", c.name+".Modelfile")
		check.Golden(t, path, []byte(got))
	}
}
