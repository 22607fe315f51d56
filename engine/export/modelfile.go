package export

import (
	"fmt"
	"regexp"
	"strings"
)

// Modelfile is an Ollama Modelfile for a GGUF export: FROM the model file, ADAPTER the
// LoRA file (none when ""), TEMPLATE translated from the Jinja chat template when it is
// one of the families Ollama's Go templates can express (ChatML, Llama 3), SYSTEM the
// template's default system prompt if it has one, and a PARAMETER stop per stop token.
// A template it cannot translate is left out with a comment saying so: Ollama then
// falls back to the GGUF's tokenizer.chat_template.
func Modelfile(from, adapter, chatTemplate string, stops []string) string {
	var b strings.Builder
	b.WriteString("# Ollama Modelfile written by tuft checkpoints export. Create the model with:\n")
	b.WriteString("#   ollama create NAME -f Modelfile\n")
	fmt.Fprintf(&b, "FROM %s\n", relPath(from))
	if adapter != "" {
		fmt.Fprintf(&b, "ADAPTER %s\n", relPath(adapter))
	}
	tmpl, system, family := translateTemplate(chatTemplate)
	switch {
	case tmpl != "":
		fmt.Fprintf(&b, "# TEMPLATE: the model's chat template (%s), in Ollama's template language\n", family)
		fmt.Fprintf(&b, "TEMPLATE \"\"\"%s\"\"\"\n", tmpl)
	case chatTemplate != "":
		b.WriteString("# TEMPLATE: the chat template is not one this exporter translates; Ollama reads it from the GGUF's tokenizer.chat_template\n")
	default:
		b.WriteString("# TEMPLATE: the model has no chat template\n")
	}
	if system != "" {
		fmt.Fprintf(&b, "SYSTEM \"\"\"%s\"\"\"\n", system)
	}
	for _, s := range stops {
		fmt.Fprintf(&b, "PARAMETER stop %q\n", s)
	}
	return b.String()
}

func relPath(name string) string {
	if strings.HasPrefix(name, "/") || strings.HasPrefix(name, ".") {
		return name
	}
	return "./" + name
}

const chatMLTemplate = `{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
`

const llama3Template = `{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>

{{ .Content }}<|eot_id|>
{{- end }}<|start_header_id|>assistant<|end_header_id|>

`

// chatMLSystem finds a ChatML template's default system prompt: the text of a system turn
// written as a literal in the template (rendered when no system message is given).
// The newline after "system" is a Jinja escape (\n) in some templates, a raw newline in
// others (SmolLM2's as its GGUF carries it).
var chatMLSystem = regexp.MustCompile(`<\|im_start\|>system(?:\\n|\n)([^'"<]*)<\|im_end\|>`)

// translateTemplate turns a Jinja chat template into Ollama's, with the default system
// prompt and the family's name; "" when the family is not recognised.
func translateTemplate(j string) (tmpl, system, family string) {
	switch {
	case strings.Contains(j, "<|im_start|>") && strings.Contains(j, "<|im_end|>"):
		if m := chatMLSystem.FindStringSubmatch(j); m != nil {
			system = m[1]
		}
		return chatMLTemplate, system, "ChatML"
	case strings.Contains(j, "<|start_header_id|>") && strings.Contains(j, "<|eot_id|>"):
		return llama3Template, "", "Llama 3"
	}
	return "", "", ""
}
