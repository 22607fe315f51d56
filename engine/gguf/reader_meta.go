package gguf

import (
	"errors"
	"fmt"
)

// Lookup returns a metadata entry.
func (f *File) Lookup(key string) (KV, bool) {
	i, ok := f.kv[key]
	if !ok {
		return KV{}, false
	}
	return f.KV[i], true
}

// Tensor returns a tensor's directory entry.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.tensors[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// ErrMissing is wrapped by the typed getters when a key is absent.
var ErrMissing = errors.New("missing")

// String returns a string metadata value.
func (f *File) String(key string) (string, error) {
	kv, ok := f.Lookup(key)
	if !ok {
		return "", fmt.Errorf("gguf: metadata key %q is %w", key, ErrMissing)
	}
	s, ok := kv.Value.(string)
	if !ok {
		return "", fmt.Errorf("gguf: metadata key %q is a %s, want a string", key, kv.Type)
	}
	return s, nil
}

// Uint returns an unsigned (or non-negative signed) integer metadata value.
func (f *File) Uint(key string) (uint64, error) {
	kv, ok := f.Lookup(key)
	if !ok {
		return 0, fmt.Errorf("gguf: metadata key %q is %w", key, ErrMissing)
	}
	var v int64
	switch x := kv.Value.(type) {
	case uint8:
		return uint64(x), nil
	case uint16:
		return uint64(x), nil
	case uint32:
		return uint64(x), nil
	case uint64:
		return x, nil
	case int8:
		v = int64(x)
	case int16:
		v = int64(x)
	case int32:
		v = int64(x)
	case int64:
		v = x
	default:
		return 0, fmt.Errorf("gguf: metadata key %q is a %s, want an integer", key, kv.Type)
	}
	if v < 0 {
		return 0, fmt.Errorf("gguf: metadata key %q is %d, want a non-negative integer", key, v)
	}
	return uint64(v), nil
}

// Float returns a floating-point (or integer) metadata value.
func (f *File) Float(key string) (float64, error) {
	kv, ok := f.Lookup(key)
	if !ok {
		return 0, fmt.Errorf("gguf: metadata key %q is %w", key, ErrMissing)
	}
	switch x := kv.Value.(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	}
	u, err := f.Uint(key)
	if err != nil {
		return 0, fmt.Errorf("gguf: metadata key %q is a %s, want a number", key, kv.Type)
	}
	return float64(u), nil
}

// Bool returns a boolean metadata value.
func (f *File) Bool(key string) (bool, error) {
	kv, ok := f.Lookup(key)
	if !ok {
		return false, fmt.Errorf("gguf: metadata key %q is %w", key, ErrMissing)
	}
	b, ok := kv.Value.(bool)
	if !ok {
		return false, fmt.Errorf("gguf: metadata key %q is a %s, want a bool", key, kv.Type)
	}
	return b, nil
}

// Strings returns an array-of-strings metadata value.
func (f *File) Strings(key string) ([]string, error) {
	kv, ok := f.Lookup(key)
	if !ok {
		return nil, fmt.Errorf("gguf: metadata key %q is %w", key, ErrMissing)
	}
	s, ok := kv.Value.([]string)
	if !ok {
		return nil, fmt.Errorf("gguf: metadata key %q is a %s, want an array of strings", key, describe(kv))
	}
	return s, nil
}

// Ints returns an array of integers as int64.
func (f *File) Ints(key string) ([]int64, error) {
	kv, ok := f.Lookup(key)
	if !ok {
		return nil, fmt.Errorf("gguf: metadata key %q is %w", key, ErrMissing)
	}
	switch x := kv.Value.(type) {
	case []int32:
		return widen(x), nil
	case []uint32:
		return widen(x), nil
	case []int8:
		return widen(x), nil
	case []uint8:
		return widen(x), nil
	case []int16:
		return widen(x), nil
	case []uint16:
		return widen(x), nil
	case []int64:
		return x, nil
	}
	return nil, fmt.Errorf("gguf: metadata key %q is a %s, want an array of integers", key, describe(kv))
}

// Floats returns an array of numbers as float32.
func (f *File) Floats(key string) ([]float32, error) {
	kv, ok := f.Lookup(key)
	if !ok {
		return nil, fmt.Errorf("gguf: metadata key %q is %w", key, ErrMissing)
	}
	switch x := kv.Value.(type) {
	case []float32:
		return x, nil
	case []float64:
		out := make([]float32, len(x))
		for i, v := range x {
			out[i] = float32(v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("gguf: metadata key %q is a %s, want an array of floats", key, describe(kv))
}

func widen[E int8 | uint8 | int16 | uint16 | int32 | uint32](x []E) []int64 {
	out := make([]int64, len(x))
	for i, v := range x {
		out[i] = int64(v)
	}
	return out
}

func describe(kv KV) string {
	if kv.Type == TypeArray {
		return fmt.Sprintf("array (%T)", kv.Value)
	}
	return kv.Type.String()
}
