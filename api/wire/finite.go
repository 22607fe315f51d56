package wire

import (
	"math"
	"slices"
	"strconv"
)

// JSON has no literal for NaN or the infinities, and encoding/json refuses them: a
// result holding one would fail to encode (a 500 to the client). These types encode a
// non-finite number as null instead.

// Metrics is a metrics map whose non-finite values encode as null.
type Metrics map[string]float64

// MarshalJSON implements json.Marshaler.
func (m Metrics) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("null"), nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // encoding/json's order
	b := []byte{'{'}
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, k)
		b = append(b, ':')
		b = appendFloat(b, m[k], 64)
	}
	return append(b, '}'), nil
}

// Floats is a float32 list whose non-finite values encode as null.
type Floats []float32

// MarshalJSON implements json.Marshaler.
func (f Floats) MarshalJSON() ([]byte, error) {
	if f == nil {
		return []byte("null"), nil
	}
	b := make([]byte, 0, 2+10*len(f))
	b = append(b, '[')
	for i, v := range f {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendFloat(b, float64(v), 32)
	}
	return append(b, ']'), nil
}

// appendFloat writes v as encoding/json would (shortest form), or null.
func appendFloat(b []byte, v float64, bits int) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	abs := math.Abs(v)
	format := byte('f')
	if abs != 0 && (bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21)) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, v, format, -1, bits)
	if format == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// finite32 returns a pointer to v, or nil when v is not finite.
func finite32(v float32) *float32 {
	if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
		return nil
	}
	return &v
}
