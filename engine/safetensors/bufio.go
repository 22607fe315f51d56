package safetensors

import (
	"bufio"
	"io"
)

func newBufWriter(w io.Writer) *bufio.Writer { return bufio.NewWriterSize(w, 1<<20) }
