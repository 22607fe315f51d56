//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd || windows)

package logstore

import "os"

// lockFile is a no-op where there is no file lock we rely on: run one tuft per store.
func lockFile(*os.File) error { return nil }

func unlockFile(*os.File) error { return nil }

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
