// Package chat renders HuggingFace chat templates in pure Go.
//
// A chat template is the Jinja source found under "chat_template" in a
// checkpoint's tokenizer_config.json (see engine.Model.ChatTemplate). It turns
// a list of role/content messages into the exact prompt string the model was
// trained on. Templates are evaluated with github.com/nikolalohinski/gonja/v2,
// configured the way transformers configures Jinja for chat templates
// (trim_blocks and lstrip_blocks on, no autoescaping, undefined values are
// lenient so that `is defined` works).
//
// The variables transformers provides are available: messages (a list of
// dicts with "role" and "content"), add_generation_prompt, bos_token,
// eos_token and raise_exception(msg), plus anything in Options.Extra.
//
// Supported and tested: for loops with loop.first/last/index0/index, if/elif/
// else, set (including namespace() attribute assignment from inside loops),
// indexing (messages[0]['role'], message.role), slicing (messages[1:]),
// string concatenation with + and ~, filters such as trim and length, tests
// such as `is defined`, `is none` and `is string`, the `in` operator and
// {%- -%} whitespace control.
//
// Not supported: {% include %}, {% import %} and {% extends %} cannot reach
// any file (the template is compiled alone), and the transformers-specific
// helper strftime_now is not provided (pass a value through Options.Extra
// instead). gonja is not a complete Jinja implementation; Parse reports a
// template it cannot compile instead of rendering it wrongly. Known
// differences from Python Jinja in gonja v2.9.1 (pinned by
// TestGonjaDifferences):
//   - `x in y|f` and `not y|f` apply the filter to the whole test; write
//     `x in (y|f)` and `not (y|f)`.
//   - an undefined variable `is none`, and {{ none }} prints nothing.
//   - dict iteration (items(), tojson) is in sorted key order, and tojson
//     emits no spaces after separators.
//
// A conversation from a request is rendered with Options.Limits: its messages and
// bytes are checked before rendering starts, the output stops once it passes
// MaxOutputBytes (callers derive it from the model's context), and an ended ctx stops
// the render at its next piece of output (issue 22).
package chat
