package wire

import (
	"testing"

	"github.com/klauspost/compress/zstd"
)

func zstdCompress(t *testing.T, b []byte) []byte {
	e, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	return e.EncodeAll(b, nil)
}
