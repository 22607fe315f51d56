package logstore

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

var errLocked = errors.New("locked by another process")

// db is one open file, shared by the namespaces (Stores) of a process.
type db struct {
	path string
	log  *slog.Logger
	now  func() time.Time // for expiries: see WithClock

	mu    sync.RWMutex // index, f, size, live
	f     *os.File
	index map[string]entry
	size  int64 // append position
	live  int64 // bytes of frames' live records, for the compaction trigger

	qmu     sync.Mutex
	queue   []*call
	overlay map[string]pendingKey // keys with queued, uncommitted writes (for SetNX)
	closed  bool
	kick    chan struct{}
	stopped chan struct{}
	broken  error // a failed write that could not be undone: refuse further writes
	// sealed: nothing was written since the last mark (the close needs none).
	sealed bool
	// fault, in tests, is called at points of the write protocols (a crash there).
	fault func(point string)

	refs int
}

type pendingKey struct {
	n   int // queued writes of the key
	del bool
	exp int64
}

var (
	sharedMu sync.Mutex
	shared   = map[string]*db{}
)

func openDB(path string, now func() time.Time) (*db, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store file %s: %w", path, err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("store file %s is locked by another process (is another tuft running?)", path)
		}
		return nil, fmt.Errorf("store file %s: lock: %w", path, err)
	}
	// The lock says no other process uses the file, so a compaction file is a crashed
	// process's leftover.
	if err := os.Remove(path + ".compact"); err == nil {
		slog.Default().Info("store file: removed the leftover of an interrupted compaction", "file", path+".compact")
	}
	d := &db{path: path, log: slog.Default(), now: now, f: f, index: map[string]entry{}, overlay: map[string]pendingKey{},
		kick: make(chan struct{}, 1), stopped: make(chan struct{})}
	if err := d.load(); err != nil {
		f.Close()
		return nil, err
	}
	// Seal what was loaded: damage in it from now on is followed by this mark, so it can
	// never pass for an unfinished write.
	if err := d.seal(); err != nil {
		f.Close()
		return nil, err
	}
	go d.loop()
	return d, nil
}

// seal appends a mark and syncs it, unless nothing was written since the last one.
// Callers own d's file (the commit goroutine, or before and after it runs).
func (d *db) seal() error {
	if d.sealed {
		return nil
	}
	if _, err := d.f.WriteAt(markFrame(d.size), d.size); err != nil {
		_ = d.f.Truncate(d.size)
		return fmt.Errorf("store file %s: write a mark: %w", d.path, err)
	}
	if err := datasync(d.f); err != nil {
		return fmt.Errorf("store file %s: %w", d.path, err)
	}
	d.size += markLen
	d.sealed = true
	return nil
}

func (d *db) hit(point string) {
	if d.fault != nil {
		d.fault(point)
	}
}

// load reads the file into the index. Damage followed by a mark (a later, completed
// write) is corruption: nothing is changed and the error says where and what to do. Damage
// with no mark after it is the unfinished last write of a crash: it is cut off.
func (d *db) load() error {
	fi, err := d.f.Stat()
	if err != nil {
		return fmt.Errorf("store file %s: %w", d.path, err)
	}
	if fi.Size() == 0 {
		if _, err := d.f.WriteAt([]byte(magic), 0); err != nil {
			return fmt.Errorf("store file %s: %w", d.path, err)
		}
		if err := d.f.Sync(); err != nil {
			return fmt.Errorf("store file %s: %w", d.path, err)
		}
		if err := syncDir(d.path); err != nil {
			return fmt.Errorf("store file %s: %w", d.path, err)
		}
		d.size = int64(len(magic))
		return nil
	}
	if err := checkMagic(d.f, d.path); err != nil {
		return err
	}
	now := d.now().UnixNano()
	var w walkResult
	err = walk(d.f, fi.Size(), func(off int64, payload []byte, ops []op, voffs []int) error {
		if !w.damaged() {
			d.apply(ops, voffs, off+frameHeader, now)
		}
		return nil
	}, &w)
	if err != nil {
		return fmt.Errorf("store file %s: %w", d.path, err)
	}
	if !w.damaged() {
		d.size = fi.Size()
		d.sealed = w.lastIsMark
		return nil
	}
	first := w.damage[0]
	if !w.tornTail(fi.Size()) {
		return &CorruptError{Path: d.path, First: first, Regions: len(w.damage), Size: fi.Size()}
	}
	// The tail of the last write: no later write follows it, so the store opens on the
	// intact prefix. Its bytes are kept aside first (tail.go): a complete frame with a bad
	// checksum may have been acknowledged, and `tuft store check` reports it.
	kept, err := keepTail(d.f, d.path, first.Offset, fi.Size(), time.Now())
	if err != nil {
		return fmt.Errorf("store file %s: keep the damaged end (offset %d, %d bytes) aside before cutting it off: %w", d.path, first.Offset, fi.Size()-first.Offset, err)
	}
	reason, torn := classifyTail(tailHead(d.f, first.Offset, fi.Size()), first.Offset)
	d.log.Warn("store file: cut off the damaged end of its last write and kept it aside; run `tuft store check`", "file", d.path, "offset", first.Offset,
		"bytes", fi.Size()-first.Offset, "reason", reason, "unfinished_write", torn, "kept_in", kept, "keys", first.Keys)
	if err := d.f.Truncate(first.Offset); err != nil {
		return fmt.Errorf("store file %s: truncate a torn tail: %w", d.path, err)
	}
	if err := d.f.Sync(); err != nil {
		return fmt.Errorf("store file %s: %w", d.path, err)
	}
	d.size = first.Offset
	return nil
}

// CorruptError is a store file damaged where a crash cannot have left it.
type CorruptError struct {
	Path    string
	First   Damage // the first damaged region
	Regions int    // how many there are
	Size    int64
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("store file %s is corrupt: %s at offset %d (%d damaged bytes, to offset %d; %d damaged region(s) in all), "+
		"followed by records written after it, so it is not an unfinished last write. Nothing was changed and tuft will not start on it, "+
		"so nothing is dropped silently. Run `tuft store check --path %s` to see the damage, then `tuft store repair --path %s` "+
		"to keep every intact record (the damaged bytes are moved aside to a file), or restore the file from a backup",
		e.Path, e.First.Reason, e.First.Offset, e.First.End-e.First.Offset, e.First.End, e.Regions, e.Path, e.Path)
}

func checkMagic(f io.ReaderAt, path string) error {
	head := make([]byte, len(magic))
	if _, err := f.ReadAt(head, 0); err != nil || string(head) != magic {
		return fmt.Errorf("store file %s is not a TuFT store (bad header); move it away or point persistence.path elsewhere", path)
	}
	return nil
}

// apply updates the index with a committed frame whose payload starts at base. Callers
// hold d.mu (or own d exclusively).
func (d *db) apply(ops []op, voffs []int, base int64, now int64) {
	for i, o := range ops {
		if old, ok := d.index[o.key]; ok {
			d.live -= recSize(o.key, int(old.n))
			delete(d.index, o.key)
		}
		if o.kind == opSet && (o.exp == 0 || o.exp > now) {
			d.index[o.key] = entry{off: base + int64(voffs[i]), n: int32(len(o.val)), exp: o.exp}
			d.live += recSize(o.key, len(o.val))
		}
	}
}

func (d *db) close() error {
	d.qmu.Lock()
	if d.closed {
		d.qmu.Unlock()
		return nil
	}
	d.closed = true
	close(d.kick)
	broken := d.broken
	d.qmu.Unlock()
	<-d.stopped
	d.mu.Lock()
	defer d.mu.Unlock()
	var err error
	if broken == nil {
		// A clean close seals the last writes: damage in them is then never taken for
		// an unfinished write.
		err = d.seal()
	}
	return errors.Join(err, d.f.Close())
}

func dirOf(path string) string { return filepath.Dir(path) }
