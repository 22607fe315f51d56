//go:build !unix

package safetensors

import "os"

// mapFile does not map where mmap does not exist: Open then reads the data.
func mapFile(*os.File, int64) ([]byte, error) { return nil, nil }

func unmapFile([]byte) error { return nil }

func dropPages(_, _ []byte) {}
