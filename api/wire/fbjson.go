package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// The JSON form of forward/forward_backward (SDK 0.18–0.24) carries long arrays of
// numbers. Decoded generically (json.Number per element, raw copies of every loss input)
// it cost over ten times the body in memory. This decoder parses each array straight
// into its final slice, sized by counting elements first, and decodes the body in place
// (no copy of it): what it allocates is about the size of the numbers themselves.

// fbBody is the top level of a forward/forward_backward JSON body.
type fbBody struct {
	ForwardBackwardInput *fbInput `json:"forward_backward_input"`
	ForwardInput         *fbInput `json:"forward_input"`
	ModelID              string   `json:"model_id"`
	SeqID                *int64   `json:"seq_id"`
}

type fbInput struct {
	Data         []fbDatum          `json:"data"`
	LossFn       string             `json:"loss_fn"`
	LossFnConfig map[string]float64 `json:"loss_fn_config,omitempty"`
}

type fbDatum struct {
	ModelInput   fbModelInput          `json:"model_input"`
	LossFnInputs map[string]*lossInput `json:"loss_fn_inputs"`
}

type fbModelInput struct {
	Chunks []fbChunk `json:"chunks"`
}

// fbChunk is one chunk of a model input.
type fbChunk struct {
	Type   string    `json:"type"`
	Tokens tokenList `json:"tokens"`
}

// tokenList is a JSON array of token ids parsed straight into int32s. A bad id is
// recorded, not returned, so the caller can say where it is.
type tokenList struct {
	v   []int32
	err error
}

func (tl *tokenList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	tl.v = make([]int32, 0, countElements(b))
	bad, text := parseNumbers(b, func(v float64) bool {
		if v != math.Trunc(v) || v < math.MinInt32 || v > math.MaxInt32 {
			tl.err = errf("tokens", "token id %v is out of range", v)
			return false
		}
		tl.v = append(tl.v, int32(v))
		return true
	})
	if bad >= 0 && tl.err == nil {
		tl.err = errf(fmt.Sprintf("tokens[%d]", bad), "%s is not a token id", text)
	}
	if tl.err != nil {
		tl.v = nil
	}
	return nil
}

// lossInput is a loss input: a tensor object, or a plain list of numbers.
type lossInput struct {
	t   tensorJSON
	err error
}

// tensorJSON is a TensorData (the JSON form of a Tensor) with its values parsed as float64s.
type tensorJSON struct {
	Data              numbers `json:"data"`
	DType             string  `json:"dtype"`
	Shape             []int64 `json:"shape,omitempty"`
	SparseCrowIndices []int64 `json:"sparse_crow_indices,omitempty"`
	SparseColIndices  []int64 `json:"sparse_col_indices,omitempty"`
}

func (li *lossInput) UnmarshalJSON(b []byte) error {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	var err error
	if i < len(b) && b[i] == '[' { // a plain list
		err = li.t.Data.UnmarshalJSON(b[i:])
	} else {
		err = json.Unmarshal(b, &li.t)
	}
	var we *Error
	if errors.As(err, &we) {
		// Recorded for the caller, which knows where this input is.
		li.err = err
		return nil
	}
	return err
}

// numbers is a JSON array of numbers parsed into float64s; a non-number fails it.
type numbers []float64

func (n *numbers) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = nil
		return nil
	}
	vals := make([]float64, 0, countElements(b))
	bad, text := parseNumbers(b, func(v float64) bool { vals = append(vals, v); return true })
	if bad >= 0 {
		return errf(fmt.Sprintf("data[%d]", bad), "%s is not a number", text)
	}
	*n = vals
	return nil
}

// countElements is the number of elements of a JSON array of numbers, for sizing its
// slice once (an over-count only if a string element holds commas, and then the array is
// refused anyway).
func countElements(b []byte) int {
	n, any := 0, false
	for _, c := range b {
		switch c {
		case ',':
			n++
		case '[', ']', ' ', '\t', '\n', '\r':
		default:
			any = true
		}
	}
	if !any {
		return 0
	}
	return n + 1
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// parseNumbers parses b, a valid JSON array of numbers, calling add for each (add may
// stop the parse by returning false). bad is the index of the first element that is not
// a number, or where add stopped (-1 if neither), text that element.
func parseNumbers(b []byte, add func(float64) bool) (bad int, text string) {
	if len(b) == 0 || b[0] != '[' {
		return 0, strconv.Quote(string(b[:min(len(b), 32)]))
	}
	i, k := 1, 0
	for {
		for i < len(b) && isSpace(b[i]) {
			i++
		}
		if i >= len(b) || b[i] == ']' {
			return -1, ""
		}
		start := i
		for i < len(b) && b[i] != ',' && b[i] != ']' && !isSpace(b[i]) {
			if b[i] == '"' || b[i] == '[' || b[i] == '{' {
				return k, elementText(b, start)
			}
			i++
		}
		v, ok := parseNumber(b[start:i])
		if !ok || !add(v) {
			return k, elementText(b, start)
		}
		k++
		for i < len(b) && isSpace(b[i]) {
			i++
		}
		if i < len(b) && b[i] == ',' {
			i++
		}
	}
}

// elementText is a short rendering of the element at b[start:], for error messages.
func elementText(b []byte, start int) string {
	end := min(len(b), start+32)
	for j := start; j < end; j++ {
		if b[j] == ',' || b[j] == ']' {
			end = j
			break
		}
	}
	return strconv.Quote(string(b[start:end]))
}

// parseNumber parses one JSON number; integers of up to 15 digits without allocating.
func parseNumber(s []byte) (float64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	neg := s[0] == '-'
	d := s
	if neg {
		d = s[1:]
	}
	if len(d) > 0 && len(d) <= 15 {
		var v int64
		ok := true
		for _, c := range d {
			if c < '0' || c > '9' {
				ok = false
				break
			}
			v = v*10 + int64(c-'0')
		}
		if ok {
			if neg {
				v = -v
			}
			return float64(v), true
		}
	}
	f, err := strconv.ParseFloat(string(s), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}

// tensor converts a parsed tensor (the loss input name, for the SDK's untyped lists).
func (td *tensorJSON) tensor(name string) (Tensor, error) {
	dt := Float32
	switch td.DType {
	case "float32", "float", "bfloat16":
	case "int64", "int32", "int":
		dt = Int64
	case "":
		// The SDK coerces plain lists by key; do the same.
		if name == "target_tokens" {
			dt = Int64
		}
	default:
		return Tensor{}, errf("dtype", "%q is not supported (float32 or int64)", td.DType)
	}
	var vf []float32
	var vi []int64
	if dt == Float32 {
		vf = make([]float32, len(td.Data))
		for i, v := range td.Data {
			vf[i] = float32(v)
		}
	} else {
		vi = make([]int64, len(td.Data))
		for i, v := range td.Data {
			if v != math.Trunc(v) || math.Abs(v) > 1<<63 {
				return Tensor{}, errf(fmt.Sprintf("data[%d]", i), "%v is not an integer", v)
			}
			vi[i] = int64(v)
		}
	}
	if td.SparseCrowIndices != nil || td.SparseColIndices != nil {
		if len(td.Shape) != 2 {
			return Tensor{}, errf("shape", "a sparse tensor needs a 2-D shape, got %v", td.Shape)
		}
		n, err := shapeLen(td.Shape)
		if err != nil {
			return Tensor{}, err
		}
		return csrToDense(dt, intsOf(td.Shape), n, vf, vi, td.SparseCrowIndices, td.SparseColIndices)
	}
	t := Tensor{DType: dt, F32: vf, I64: vi}
	n := len(td.Data)
	if len(td.Shape) == 0 {
		t.Shape = []int{n}
		return t, nil
	}
	want, err := shapeLen(td.Shape)
	if err != nil {
		return t, err
	}
	if want != n {
		return t, errf("shape", "%v describes %d elements but data has %d", td.Shape, want, n)
	}
	t.Shape = intsOf(td.Shape)
	return t, nil
}

// decodeInPlace decodes one JSON value from b without copying b (json.Unmarshal scans
// its input where it is), with errors like DecodeJSON's.
func decodeInPlace(b []byte, v any) error {
	err := json.Unmarshal(b, v)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var we *Error
	switch {
	case errors.As(err, &we):
		return err
	case errors.As(err, &se):
		if len(b) > 0 && int(se.Offset) < len(b) && se.Offset > 0 && isTrailing(err) {
			return errf("", "malformed JSON: trailing data after the object")
		}
		if se.Offset >= int64(len(b)) {
			return errf("", "malformed JSON: unexpected end of input")
		}
		return errf("", "malformed JSON at byte %d: %v", se.Offset, err)
	case errors.As(err, &te):
		f := te.Field
		if f == "" {
			f = "body"
		}
		return errf(f, "expected %s, got JSON %s", te.Type, te.Value)
	}
	return errf("", "invalid JSON: %v", err)
}

func isTrailing(err error) bool {
	const s = "after top-level value"
	m := err.Error()
	for i := 0; i+len(s) <= len(m); i++ {
		if m[i:i+len(s)] == s {
			return true
		}
	}
	return false
}

// decodeForwardBackwardJSON is DecodeForwardBackwardJSON's lean implementation.
func decodeForwardBackwardJSON(body []byte, forwardOnly bool) (*ForwardBackwardCall, error) {
	if len(body) == 0 {
		return nil, errf("", "empty body: a JSON object is required")
	}
	var m fbBody
	if err := decodeInPlace(body, &m); err != nil {
		return nil, err
	}
	in, field := m.ForwardBackwardInput, "forward_backward_input"
	if in == nil {
		in, field = m.ForwardInput, "forward_input"
		forwardOnly = forwardOnly || in != nil
	}
	if in == nil {
		return nil, errf("forward_backward_input", "is required")
	}
	if m.ModelID == "" {
		return nil, errf("model_id", "is required")
	}
	call := &ForwardBackwardCall{ModelID: m.ModelID, ForwardOnly: forwardOnly, Req: ForwardBackwardInput{LossFn: in.LossFn, LossFnConfig: in.LossFnConfig}}
	if m.SeqID != nil {
		call.SeqID, call.HasSeqID = *m.SeqID, true
	}
	if len(in.Data) == 0 {
		return nil, errf(field+".data", "is empty: at least one datum is required")
	}
	call.Req.Data = make([]Datum, 0, len(in.Data))
	for i := range in.Data {
		d := &in.Data[i]
		f := fmt.Sprintf("%s.data[%d]", field, i)
		var toks []int32
		for j, c := range d.ModelInput.Chunks {
			cf := fmt.Sprintf("%s.model_input.chunks[%d]", f, j)
			switch c.Type {
			case "encoded_text", "":
			default:
				return nil, errf(cf, "chunk type %q is not supported: only encoded_text chunks are", c.Type)
			}
			if c.Tokens.err != nil {
				return nil, prefix(cf, c.Tokens.err)
			}
			if len(d.ModelInput.Chunks) == 1 {
				toks = c.Tokens.v
			} else {
				toks = append(toks, c.Tokens.v...)
			}
		}
		inputs := make(map[string]Tensor, len(d.LossFnInputs))
		for name, li := range d.LossFnInputs {
			if li == nil {
				return nil, errf(fmt.Sprintf("%s.loss_fn_inputs[%q]", f, name), "is null")
			}
			if li.err != nil {
				return nil, prefix(fmt.Sprintf("%s.loss_fn_inputs[%q]", f, name), li.err)
			}
			t, err := li.t.tensor(name)
			if err != nil {
				return nil, prefix(fmt.Sprintf("%s.loss_fn_inputs[%q]", f, name), err)
			}
			li.t.Data = nil // release the parsed numbers as soon as they are converted
			inputs[name] = t
		}
		call.Req.Data = append(call.Req.Data, Datum{Tokens: toks, LossInputs: inputs})
		d.ModelInput.Chunks = nil
	}
	return call, nil
}
