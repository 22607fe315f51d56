package wire

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// EncodingError is a Content-Encoding this server does not decode (415).
type EncodingError struct{ Encoding string }

func (e *EncodingError) Error() string {
	return fmt.Sprintf("Content-Encoding %q is not supported (use zstd, gzip or none)", e.Encoding)
}

// LimitError is a decompressed body over a limit (413); Limit names its config key.
type LimitError struct {
	Limit string
	Msg   string
}

func (e *LimitError) Error() string { return e.Msg }

// InflateLimits bound a decompression.
type InflateLimits struct {
	MaxBytes int64 // limits.max_request_bytes
	// MaxRatio (limits.max_decompression_ratio) refuses output larger than this many
	// times the input (but at least minRatioFloor): a bomb is stopped after inflating
	// that much, not after the whole limit. 0: no ratio limit.
	MaxRatio int
	// Grow, if set, is told before the output buffer grows by n bytes, and may refuse.
	Grow func(n int64) error
}

// minRatioFloor is the output any body may inflate to whatever its ratio: small JSON
// bodies compress far better than the ratio a bomb needs to matter.
const minRatioFloor = 1 << 20

// maxWindow bounds the zstd window a body may ask for (a decoder allocates it).
const maxWindow = 32 << 20

// Inflate undoes a Content-Encoding (identity, zstd or gzip) within lim, growing its
// output as it inflates.
func Inflate(encoding string, body []byte, lim InflateLimits) ([]byte, error) {
	var r io.Reader
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "identity":
		return body, nil
	case "zstd":
		d, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderMaxMemory(uint64(lim.MaxBytes)),
			zstd.WithDecoderMaxWindow(maxWindow), zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			return nil, errf("Content-Encoding", "zstd: %v", err)
		}
		defer d.Close()
		r = d
	case "gzip", "x-gzip":
		g, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, errf("Content-Encoding", "gzip body is corrupt: %v", err)
		}
		r = g
	default:
		return nil, &EncodingError{Encoding: encoding}
	}
	limit, limitKey := lim.MaxBytes, "limits.max_request_bytes"
	if lim.MaxRatio > 0 {
		if byRatio := max(int64(lim.MaxRatio)*int64(len(body)), minRatioFloor); byRatio < limit {
			limit, limitKey = byRatio, "limits.max_decompression_ratio"
		}
	}
	var out []byte
	for {
		if len(out) == cap(out) {
			step := min(max(int64(len(out)), 64<<10), limit-int64(len(out))+1)
			if lim.Grow != nil {
				if err := lim.Grow(step); err != nil {
					return nil, err
				}
			}
			nb := make([]byte, len(out), int64(len(out))+step)
			copy(nb, out)
			out = nb
		}
		n, err := r.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if int64(len(out)) > limit {
			if limitKey == "limits.max_decompression_ratio" {
				return nil, &LimitError{Limit: limitKey, Msg: fmt.Sprintf("the %s body inflates more than %d times its %d bytes (limits.max_decompression_ratio)",
					encoding, lim.MaxRatio, len(body))}
			}
			return nil, &LimitError{Limit: limitKey, Msg: fmt.Sprintf("the decompressed body exceeds limits.max_request_bytes (%d bytes)", lim.MaxBytes)}
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, errf("Content-Encoding", "%s body is corrupt: %v", encoding, err)
		}
	}
}
