//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package logstore

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock on f for this process (errLocked when
// another process holds it). It is released when f is closed.
func lockFile(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLocked
	}
	return err
}

// unlockFile releases lockFile's lock before f is closed.
func unlockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// syncDir makes a rename in path's directory durable.
func syncDir(path string) error {
	dir, err := os.Open(dirOf(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

// replaceFile renames tmp (open as nf, synced and locked) over path, whose open handle
// is old, and returns the handle of the store file now at path and whether the rename
// happened. Unix renames over open files: nf simply becomes the store file.
func replaceFile(tmp, path string, nf, old *os.File) (*os.File, bool, error) {
	if err := os.Rename(tmp, path); err != nil {
		nf.Close()
		return old, false, err
	}
	old.Close()
	return nf, true, nil
}
