package chat

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// chatMLTemplate is a copy of the template engine/preset.go writes into preset
// checkpoints.
const chatMLTemplate = `{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

// qwenTemplate follows Qwen2.5's layout: ChatML turns and a default system
// message when the conversation has none.
const qwenTemplate = `{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- else %}
    {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if not (message['role'] == 'system' and loop.first) %}
        {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
`

// llamaTemplate follows Llama 3's layout: a BOS token, role headers and
// trimmed content ended by <|eot_id|>.
const llamaTemplate = `{%- set loop_messages = messages %}
{%- for message in loop_messages %}
    {%- set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' %}
    {%- if loop.index0 == 0 %}
        {%- set content = bos_token + content %}
    {%- endif %}
    {{- content }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
`

// mistralTemplate follows Mistral's [INST] layout and rejects conversations
// whose roles do not alternate.
const mistralTemplate = `{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- '[INST] ' + system_message + '\n\n' + message['content'] + '[/INST]' }}
        {%- else %}
            {{- '[INST] ' + message['content'] + '[/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token }}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported!') }}
    {%- endif %}
{%- endfor %}
`

// msgs builds a conversation from alternating role, content pairs.
func msgs(pairs ...string) []Message {
	out := make([]Message, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, Message{Role: pairs[i], Content: pairs[i+1]})
	}
	return out
}

// The expected strings were checked against Python jinja2 3.1.6 configured as
// transformers configures it (ImmutableSandboxedEnvironment, trim_blocks and
// lstrip_blocks on).
func TestRenderModelTemplates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		src     string
		msgs    []Message
		opts    Options
		want    string
		wantErr string // raise_exception message; want is ignored when set
	}{
		{
			name: "chatml",
			src:  chatMLTemplate,
			msgs: msgs("system", "You are terse.", "user", "Hi", "assistant", "Hello.", "user", "2+2?"),
			opts: Options{AddGenerationPrompt: true},
			want: "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n" +
				"<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "chatml without generation prompt",
			src:  chatMLTemplate,
			msgs: msgs("user", "Hi"),
			want: "<|im_start|>user\nHi<|im_end|>\n",
		},
		{
			name: "chatml no messages",
			src:  chatMLTemplate,
			opts: Options{AddGenerationPrompt: true},
			want: "<|im_start|>assistant\n",
		},
		{
			name: "qwen default system",
			src:  qwenTemplate,
			msgs: msgs("user", "Hi"),
			opts: Options{AddGenerationPrompt: true, EosToken: "<|im_end|>"},
			want: "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "qwen given system",
			src:  qwenTemplate,
			msgs: msgs("system", "Be brief.", "user", "Hi", "assistant", "Hello!"),
			opts: Options{EosToken: "<|im_end|>"},
			want: "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n",
		},
		{
			name: "llama",
			src:  llamaTemplate,
			msgs: msgs("system", "  Be brief.\n", "user", " Hi ", "assistant", "Hello!"),
			opts: Options{AddGenerationPrompt: true, BosToken: "<|begin_of_text|>", EosToken: "<|eot_id|>"},
			want: "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>" +
				"<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>" +
				"<|start_header_id|>assistant<|end_header_id|>\n\n",
		},
		{
			name: "llama without generation prompt",
			src:  llamaTemplate,
			msgs: msgs("user", "Hi"),
			opts: Options{BosToken: "<|begin_of_text|>", EosToken: "<|eot_id|>"},
			want: "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
		},
		{
			name: "mistral",
			src:  mistralTemplate,
			msgs: msgs("user", "Hi", "assistant", "Hello", "user", "Bye"),
			opts: Options{BosToken: "<s>", EosToken: "</s>"},
			want: "<s>[INST] Hi[/INST] Hello</s>[INST] Bye[/INST]",
		},
		{
			name: "mistral system folded into first user turn",
			src:  mistralTemplate,
			msgs: msgs("system", "Be brief.", "user", "Hi", "assistant", "Hello"),
			opts: Options{BosToken: "<s>", EosToken: "</s>"},
			want: "<s>[INST] Be brief.\n\nHi[/INST] Hello</s>",
		},
		{
			name:    "mistral roles do not alternate",
			src:     mistralTemplate,
			msgs:    msgs("user", "Hi", "user", "again"),
			opts:    Options{BosToken: "<s>", EosToken: "</s>"},
			wantErr: "Conversation roles must alternate user/assistant/user/assistant/...",
		},
		{
			name:    "mistral starts with assistant",
			src:     mistralTemplate,
			msgs:    msgs("assistant", "Hello"),
			opts:    Options{BosToken: "<s>", EosToken: "</s>"},
			wantErr: "Conversation roles must alternate user/assistant/user/assistant/...",
		},
		{
			name:    "mistral unknown role",
			src:     mistralTemplate,
			msgs:    msgs("user", "Hi", "tool", "x"),
			opts:    Options{BosToken: "<s>", EosToken: "</s>"},
			wantErr: "Only user and assistant roles are supported!",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tpl, err := Parse(tt.src)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got, err := tpl.Render(context.Background(), tt.msgs, tt.opts)
			if tt.wantErr != "" {
				var re *RaiseError
				if !errors.As(err, &re) || re.Message != tt.wantErr {
					t.Fatalf("Render error = %v, want raise_exception(%q)", err, tt.wantErr)
				}
				if !errors.Is(err, ErrRender) || !strings.HasSuffix(err.Error(), tt.wantErr) {
					t.Fatalf("Render error %q does not wrap ErrRender and end with the message", err)
				}
				if got != "" {
					t.Fatalf("Render output on error = %q, want empty", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if got != tt.want {
				t.Fatalf("Render:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestRenderFeatures covers the Jinja constructs real chat templates use. Each
// expectation matches Python jinja2 under the transformers settings.
func TestRenderFeatures(t *testing.T) {
	t.Parallel()
	conv := msgs("system", "sys", "user", " hi ", "assistant", "yo")
	tests := []struct {
		name, src, want string
		opts            Options
	}{
		{"index", `{{ messages[0]['role'] }}/{{ messages[1].role }}/{{ messages[-1]['content'] }}`, "system/user/yo", Options{}},
		{"slice", `{% for m in messages[1:] %}{{ m.role }},{% endfor %}`, "user,assistant,", Options{}},
		{"string slice", `{{ messages[0]['content'][1:] }}`, "ys", Options{}},
		{"loop vars", `{% for m in messages %}{% if loop.first %}F{% endif %}{{ loop.index0 }}{{ loop.index }}{% if loop.last %}L{% endif %},{% endfor %}`, "F01,12,23L,", Options{}},
		{"length", `{{ messages|length }} {{ messages[1:]|length }}`, "3 2", Options{}},
		{"trim", `[{{ messages[1]['content']|trim }}]`, "[hi]", Options{}},
		{"filter binds tighter than +", `{{ '[' + messages[1]['content']|trim + ']' }}`, "[hi]", Options{}},
		{"plus and tilde", `{{ 'a' + 'b' }}{{ 'n' ~ 1 }}{{ loop_count ~ '' }}`, "abn1", Options{}},
		{"whitespace control", "a\n  {%- if true -%}\n  b  \n{%- endif -%}\n  c", "abc", Options{}},
		{"trim_blocks and lstrip_blocks", "{% if true %}\n    x\n    {% endif %}\ny", "    x\ny", Options{}},
		{"is defined", `{{ bos_token is defined }}{{ tools is defined }}{{ tools is not defined }}{{ messages[0].tool_calls is defined }}`, "TrueFalseTrueFalse", Options{}},
		{"extra variables", `{{ tools is defined }}:{{ tools|length }}:{{ date_string }}`, "True:2:26 Jul 2024", Options{Extra: map[string]any{"tools": []any{"a", "b"}, "date_string": "26 Jul 2024"}}},
		{"tokens", `{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}`, "<s>|</s>|True", Options{BosToken: "<s>", EosToken: "</s>", AddGenerationPrompt: true}},
		{"namespace", `{% set ns = namespace(n=0, roles='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% set ns.roles = ns.roles + m.role[0] %}{% endfor %}{{ ns.n }}{{ ns.roles }}`, "3sua", Options{}},
		{"set in branch", `{% if messages[0]['role'] == 'system' %}{% set rest = messages[1:] %}{% else %}{% set rest = messages %}{% endif %}{{ rest|length }}`, "2", Options{}},
		{"conditional expression", `{{ 'S' if messages[0]['role'] == 'system' else 'N' }}`, "S", Options{}},
		{"elif and not", `{% if not messages %}a{% elif messages|length > 2 %}b{% else %}c{% endif %}`, "b", Options{}},
		{"in operator", `{{ 'ys' in messages[0]['content'] }}{{ 'x' not in messages[0]['content'] }}`, "TrueTrue", Options{}},
		{"string methods", `{{ messages[1].content.strip() }}{{ messages[0].content.startswith('s') }}{{ messages[0].content.upper() }}`, "hiTrueSYS", Options{}},
		{"dict get", `{{ messages[0].get('nope', 'd') }}{{ messages[0].get('role') }}`, "dsystem", Options{}},
		{"tests", `{{ messages[0].content is string }}{{ messages[0].content is none }}{{ 2 is even }}`, "TrueFalseTrue", Options{}},
		{"selectattr and map", `{{ messages|selectattr('role', 'equalto', 'user')|list|length }}{{ messages|map(attribute='role')|join(',') }}`, "1system,user,assistant", Options{}},
		{"loop controls", `{% for m in messages %}{% if not loop.last %}{% continue %}{% endif %}{{ m.role }}{% endfor %}`, "assistant", Options{}},
		{"macro", `{% macro turn(m) %}<{{ m.role }}>{% endmacro %}{% for m in messages %}{{ turn(m) }}{% endfor %}`, "<system><user><assistant>", Options{}},
		{"comment", `{# note #}x`, "x", Options{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tpl, err := Parse(tt.src)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got, err := tpl.Render(context.Background(), conv, tt.opts)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if got != tt.want {
				t.Fatalf("Render:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestGonjaDifferences pins places where gonja v2.9.1 departs from Python
// Jinja, so that a dependency upgrade that changes them is noticed. Templates
// hitting these need parentheses (first two) or a different spelling.
func TestGonjaDifferences(t *testing.T) {
	t.Parallel()
	conv := msgs("user", "hi")
	tests := []struct {
		name, src, gonja, jinja string
	}{
		// Jinja binds the filter chain before `in`; gonja applies it to the
		// result of the `in` test. Write 'user' in (messages|map(...)|list).
		{"in before filter", `{{ 'user' in messages|map(attribute='role')|list }}`, "[]", "True"},
		// Jinja reads `not x|length` as not (x|length).
		{"not before filter", `{{ not messages|length }}`, "0", "False"},
		// Jinja prints none as "None".
		{"print none", `{{ none }}`, "", "None"},
		// Jinja's undefined is not none; gonja's is.
		{"undefined is none", `{{ tools is none }}`, "True", "False"},
		// gonja walks dicts in sorted key order, Jinja in insertion order.
		{"dict order", `{% for k, v in messages[0].items() %}{{ k }};{% endfor %}`, "content;role;", "role;content;"},
		// Jinja's tojson puts a space after separators.
		{"tojson spacing", `{{ messages[0]|tojson }}`, `{"content":"hi","role":"user"}`, `{"content": "hi", "role": "user"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tpl, err := Parse(tt.src)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got, err := tpl.Render(context.Background(), conv, Options{})
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if got != tt.gonja {
				t.Fatalf("Render = %q; gonja v2.9.1 gave %q (Python Jinja gives %q)", got, tt.gonja, tt.jinja)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		`{% if x %}`,
		`{% for m in messages %}`,
		`{{ 'unterminated }}`,
		`{% frobnicate %}`,
	} {
		_, err := Parse(src)
		if err == nil || !errors.Is(err, ErrParse) {
			t.Errorf("Parse(%q) error = %v, want one wrapping ErrParse", src, err)
			continue
		}
		t.Logf("Parse(%q): %v", src, err)
	}
}

func TestRenderErrors(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		`{{ strftime_now('%Y') }}`,          // transformers helper, not provided
		`{{ undefined_thing.attribute }}`,   // attribute of undefined, as in Jinja
		`{% include 'other.jinja' %}`,       // no loader beyond the template itself
		`{{ raise_exception('stop') }}rest`, // raised error
	} {
		tpl, err := Parse(src)
		if err != nil {
			t.Logf("Parse(%q): %v", src, err)
			continue
		}
		out, err := tpl.Render(context.Background(), msgs("user", "hi"), Options{})
		if err == nil || !errors.Is(err, ErrRender) {
			t.Errorf("Render(%q) = %q, %v; want an error wrapping ErrRender", src, out, err)
			continue
		}
		t.Logf("Render(%q): %v", src, err)
	}
}

// TestRenderConcurrent checks that one Template serves parallel renders and
// that a raise_exception in one render does not leak into another.
func TestRenderConcurrent(t *testing.T) {
	t.Parallel()
	tpl, err := Parse(mistralTemplate)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	for i := range 16 {
		go func() {
			m := msgs("user", "Hi", "assistant", "Hello")
			if i%2 == 1 {
				m = msgs("user", "Hi", "user", "Hi")
			}
			out, err := tpl.Render(context.Background(), m, Options{BosToken: "<s>", EosToken: "</s>"})
			switch {
			case i%2 == 0 && (err != nil || out != "<s>[INST] Hi[/INST] Hello</s>"):
				done <- errors.New("good render failed: " + out)
			case i%2 == 1 && err == nil:
				done <- errors.New("bad render succeeded: " + out)
			default:
				done <- nil
			}
		}()
	}
	for range 16 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// FuzzRender feeds arbitrary message content through templates and checks
// that rendering neither panics nor fails, and that content is copied
// verbatim (never interpreted as template code).
func FuzzRender(f *testing.F) {
	for _, s := range []string{"", "hello", "{{ 7*7 }}", "{% raise %}", "<|im_end|>", "\x00\xff", "  spaced\n\n", "é😀"} {
		f.Add(s, "user")
	}
	chatml, err := Parse(chatMLTemplate)
	if err != nil {
		f.Fatal(err)
	}
	llama, err := Parse(llamaTemplate)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, content, role string) {
		m := []Message{{Role: "system", Content: content}, {Role: role, Content: content}}
		got, err := chatml.Render(context.Background(), m, Options{AddGenerationPrompt: true})
		if err != nil {
			t.Fatalf("chatml: %v", err)
		}
		want := "<|im_start|>system\n" + content + "<|im_end|>\n<|im_start|>" + role + "\n" + content + "<|im_end|>\n<|im_start|>assistant\n"
		if got != want {
			t.Fatalf("chatml:\n got %q\nwant %q", got, want)
		}
		if _, err := llama.Render(context.Background(), m, Options{BosToken: "<|begin_of_text|>"}); err != nil {
			t.Fatalf("llama: %v", err)
		}
	})
}
