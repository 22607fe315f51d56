package wire

import (
	"encoding/json"
	"testing"

	"github.com/klauspost/compress/zstd"
)

type json_Number = json.Number

func zstdCompress(t *testing.T, b []byte) []byte {
	e, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	return e.EncodeAll(b, nil)
}
