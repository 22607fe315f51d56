package textgen

import (
	"bytes"
	"encoding/json"
	"sort"
)

// FieldRule says how a compatible route treats one request field. Both OpenAI's and
// Anthropic's APIs answer a field they do not know with a 400, and so do the routes
// here; the fields those APIs define are parsed, ignored where the API itself does not
// change its output for them, or accepted only with the value that asks for nothing.
type FieldRule int

// Field rules.
const (
	Parsed      FieldRule = iota // read into the request
	Ignored                      // accepted; it does not change what is generated
	DefaultOnly                  // accepted only with its no-op value (null, false, 0, "", [], {})
)

// CheckFields returns the first field (in sorted order, so the answer is stable) that
// breaks rules: unknown when rules do not list it, else a DefaultOnly field with a value.
// ok is true when every field is acceptable.
func CheckFields(raw map[string]json.RawMessage, rules map[string]FieldRule) (field string, unknown, ok bool) {
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		rule, known := rules[k]
		switch {
		case !known:
			return k, true, false
		case rule == DefaultOnly && !IsNoOp(raw[k]):
			return k, false, false
		}
	}
	return "", false, true
}

// IsNoOp reports whether a JSON value asks for nothing: null, false, 0, "", [] or {}.
func IsNoOp(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	switch string(v) {
	case "null", "false", `""`:
		return true
	}
	var f float64
	if json.Unmarshal(v, &f) == nil {
		return f == 0
	}
	var arr []json.RawMessage
	if json.Unmarshal(v, &arr) == nil {
		return len(arr) == 0
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(v, &obj) == nil {
		return len(obj) == 0
	}
	return false
}
