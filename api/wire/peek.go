package wire

import (
	"encoding/json"

	"google.golang.org/protobuf/encoding/protowire"
)

// Reading one id out of a body, before decoding the rest, lets a server refuse a request
// about someone else's run before paying for its decode. These readers walk the body
// without allocating; ok is false when they cannot tell (the full decode then reports
// the problem).

// PeekModelID returns the model_id of a forward_backward body (protobuf or JSON).
func PeekModelID(body []byte, isProto bool) (string, bool) {
	if !isProto {
		return PeekJSONString(body, "model_id")
	}
	for len(body) > 0 {
		num, typ, n := protowire.ConsumeTag(body)
		if n < 0 {
			return "", false
		}
		body = body[n:]
		if num == 1 && typ == protowire.BytesType { // ForwardBackwardRequest.model_id
			v, n := protowire.ConsumeBytes(body)
			if n < 0 {
				return "", false
			}
			return string(v), true
		}
		n = protowire.ConsumeFieldValue(num, typ, body)
		if n < 0 {
			return "", false
		}
		body = body[n:]
	}
	return "", false
}

// PeekJSONString returns the string value of key in a JSON object's top level.
func PeekJSONString(b []byte, key string) (string, bool) {
	vs, ve, ok := peekJSONValue(b, key)
	if !ok {
		return "", false
	}
	if _, e, ok := stringAt(b, vs); !ok || e != ve {
		return "", false
	}
	var s string
	if json.Unmarshal(b[vs:ve], &s) != nil {
		return "", false
	}
	return s, true
}

// PeekJSONInt returns the integer value of key in a JSON object's top level. Like
// PeekJSONString it reads a body that is otherwise invalid JSON (a NaN literal elsewhere,
// as Python's json.dumps writes), so a refused training request still names its seq_id.
func PeekJSONInt(b []byte, key string) (int64, bool) {
	vs, ve, ok := peekJSONValue(b, key)
	if !ok {
		return 0, false
	}
	var n int64
	if json.Unmarshal(b[vs:ve], &n) != nil {
		return 0, false
	}
	return n, true
}

// peekJSONValue returns the bounds of key's value in a JSON object's top level (the
// first occurrence), skipping other values without judging them.
func peekJSONValue(b []byte, key string) (start, end int, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, 0, false
	}
	i++
	for {
		i = skipSpace(b, i)
		if i >= len(b) || b[i] == '}' {
			return 0, 0, false
		}
		ks, ke, ok := stringAt(b, i)
		if !ok {
			return 0, 0, false
		}
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return 0, 0, false
		}
		i = skipSpace(b, i+1)
		e := skipValue(b, i)
		if e < 0 || e == i {
			return 0, 0, false
		}
		if string(b[ks+1:ke-1]) == key {
			return i, e, true
		}
		i = skipSpace(b, e)
		if i < len(b) && b[i] == ',' {
			i++
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// stringAt returns the bounds of the JSON string starting at b[i] (quotes included).
func stringAt(b []byte, i int) (start, end int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return i, j + 1, true
		}
	}
	return 0, 0, false
}

// skipValue returns the index just past the JSON value at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		_, e, ok := stringAt(b, i)
		if !ok {
			return -1
		}
		return e
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				_, e, ok := stringAt(b, j)
				if !ok {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && !isSpace(b[j]) {
		j++
	}
	return j
}
