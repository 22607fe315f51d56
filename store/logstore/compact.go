package logstore

import (
	"bufio"
	"fmt"
	"os"
	"sort"
)

// compactMin is the file size below which the file is never compacted (a variable for
// tests).
var compactMin int64 = 64 << 20

// maybeCompact rewrites the file when most of it is dead records. It runs on the commit
// goroutine, so no write is in progress.
func (d *db) maybeCompact() {
	d.mu.RLock()
	size, live := d.size, d.live
	d.mu.RUnlock()
	if size < compactMin || size < 2*live+int64(len(magic)) {
		return
	}
	if err := d.compact(); err != nil {
		d.log.Error("store file compaction failed; the file keeps growing until it succeeds", "file", d.path, "error", err)
	}
}

func (d *db) compact() error {
	tmp := d.path + ".compact"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // after a successful rename there is nothing left to remove
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString(magic)
	pos := int64(len(magic))
	newIndex := map[string]entry{}
	var live int64
	now := d.now().UnixNano()
	d.mu.RLock()
	keys := make([]string, 0, len(d.index))
	for k, e := range d.index {
		if e.exp == 0 || e.exp > now {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		e := d.index[k]
		val := make([]byte, e.n)
		if _, err := d.f.ReadAt(val, e.off); err != nil {
			d.mu.RUnlock()
			f.Close()
			return err
		}
		frame, voffs := encodeFrame([]op{{kind: opSet, key: k, val: val, exp: e.exp}})
		if _, err := w.Write(frame); err != nil {
			d.mu.RUnlock()
			f.Close()
			return err
		}
		newIndex[k] = entry{off: pos + frameHeader + int64(voffs[0]), n: e.n, exp: e.exp}
		live += recSize(k, int(e.n))
		pos += int64(len(frame))
	}
	d.mu.RUnlock()
	// The compacted records were all acknowledged: a mark after them says so.
	if _, err := w.Write(markFrame(pos)); err != nil {
		f.Close()
		return err
	}
	pos += markLen
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	d.hit("compact-written")
	if err := lockFile(f); err != nil {
		f.Close()
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, replaced, err := replaceFile(tmp, d.path, f, d.f)
	d.hit("compact-renamed")
	if cur == nil {
		d.qmu.Lock()
		d.broken = fmt.Errorf("store file %s: could not be opened again after compaction (%v): restart tuft", d.path, err)
		d.qmu.Unlock()
		return d.broken
	}
	d.f = cur
	if !replaced {
		return err
	}
	if err := syncDir(d.path); err != nil {
		d.log.Warn("store file: directory sync after compaction failed", "error", err)
	}
	d.index, d.size, d.live, d.sealed = newIndex, pos, live, true
	d.log.Info("store file compacted", "file", d.path, "bytes", pos, "keys", len(keys))
	return nil
}
