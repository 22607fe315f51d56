package logstore

import (
	"os"
	"syscall"
)

// datasync makes f's written data durable (fdatasync: the size and data, not times).
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
