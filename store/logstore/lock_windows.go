package logstore

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockOffset is where the lock byte sits: Windows locks are mandatory for the byte range
// they cover, so the lock covers one byte far past any data instead of the data itself.
const lockOffset = 1<<63 - 2

func lockOverlapped() *windows.Overlapped {
	return &windows.Overlapped{Offset: uint32(lockOffset & 0xffffffff), OffsetHigh: uint32(lockOffset >> 32)}
}

// lockFile takes an exclusive lock on f for this process (errLocked when another process
// holds it). It is released when f is closed.
func lockFile(f *os.File) error {
	err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, lockOverlapped())
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) || errors.Is(err, windows.ERROR_IO_PENDING) {
		return errLocked
	}
	return err
}

// unlockFile releases lockFile's lock before f is closed.
func unlockFile(f *os.File) error {
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, lockOverlapped())
}

// syncDir is a no-op: Windows has no directory fsync (NTFS journals renames itself).
func syncDir(string) error { return nil }

// replaceFile renames tmp (open as nf, synced and locked) over path, whose open handle
// is old, and returns the handle of the store file now at path (nil if it could not be
// opened again) and whether the rename happened. Windows renames neither an open file nor
// over one, so both are closed, the rename done, and the store file opened and locked
// again (another process could take the lock in between: run one tuft per store).
func replaceFile(tmp, path string, nf, old *os.File) (*os.File, bool, error) {
	nf.Close()
	old.Close()
	rerr := os.Rename(tmp, path)
	f, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if err == nil {
		if err = lockFile(f); err != nil {
			f.Close()
			f = nil
		}
	} else {
		f = nil
	}
	return f, rerr == nil, errors.Join(rerr, err)
}
