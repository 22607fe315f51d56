//go:build !linux

package logstore

import "os"

// datasync makes f's written data durable. os.File.Sync is fsync (on macOS F_FULLFSYNC,
// which reaches the disk itself; on Windows FlushFileBuffers).
func datasync(f *os.File) error { return f.Sync() }
