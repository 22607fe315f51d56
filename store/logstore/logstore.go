// Package logstore is the embedded default store: one append-only file of checksummed
// frames and an in-memory index of where each live value sits (the Bitcask design).
//
// Every write call (Set, Del, Apply, ...) becomes one frame, so it is atomic across a
// crash. Writers queue their frames while the previous group is being written; the
// committer then appends the whole group with one write and one fdatasync (group
// commit), and only afterwards makes it visible to readers and returns. Values are read
// back from the file (through the page cache), so memory holds keys and offsets, not
// values. When the file holds mostly dead records it is compacted: the live ones are
// copied to a new file that atomically replaces it.
//
// Damage is told apart from an unfinished write by marks: every group write starts with
// a mark frame that records its own offset, and a mark is also written when the file is
// opened and closed. A group is only written after the previous one was synced, so a
// damaged frame followed by an intact mark was acknowledged: the store then refuses to
// open (nothing is cut) and `tuft store check` / `tuft store repair` take over. Only
// damage with no mark after it, the last write a crash interrupted, is cut off.
package logstore

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tuft-go/tuft/store"
)

const (
	magic = "TUFTKV01"
	// frameHeader is the payload length and its CRC-32C.
	frameHeader = 8
	// maxGroup bounds one group write; a frame larger than it is written alone.
	maxGroup = 16 << 20
	// maxTornTail is the most a crash can leave half-written at the end of the file (a
	// group, or one large frame); a bad frame followed by more than this is corruption.
	maxTornTail = 256 << 20
	// markKey names mark frames. Real keys are namespace + "\x00" + key with a non-empty
	// namespace, so none starts with "\x00"; a mark is a delete of markKey, which older
	// versions apply as a no-op.
	markKey = "\x00mark"
)

// markFrame is the mark written at file offset off: a frame that records its own offset.
func markFrame(off int64) []byte {
	b, _ := encodeFrame([]op{{kind: opDel, key: markKey, exp: off}})
	return b
}

// markLen is the size of a mark frame.
var markLen = int64(len(markFrame(0)))

// isMark reports whether a frame at off is a mark written there.
func isMark(ops []op, off int64) bool {
	return len(ops) == 1 && ops[0].kind == opDel && ops[0].key == markKey && ops[0].exp == off
}

var errLocked = errors.New("locked by another process")

// compactMin is the file size below which the file is never compacted (a variable for
// tests).
var compactMin int64 = 64 << 20

const (
	opSet = 1
	opDel = 2
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// entry locates a live value in the file.
type entry struct {
	off int64 // of the value
	n   int32
	exp int64 // unix nanoseconds, 0 = none
}

// op is one write inside a frame.
type op struct {
	kind byte
	key  string // namespace + "\x00" + key
	val  []byte
	exp  int64
}

// call is one queued frame and what to tell its writer.
type call struct {
	frame []byte
	ops   []op
	voffs []int // each op's value offset within frame
	done  func(error)
}

// db is one open file, shared by the namespaces (Stores) of a process.
type db struct {
	path string
	log  *slog.Logger

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

// Store is one namespace of an embedded store file.
type Store struct {
	d    *db
	ns   string
	now  func() time.Time
	stop chan struct{}
	wg   sync.WaitGroup
}

// Open opens (creating if needed) the store file at path and returns its namespace.
func Open(path, namespace string) (*Store, error) {
	if namespace == "" || strings.Contains(namespace, "\x00") {
		return nil, fmt.Errorf("embedded store: bad namespace %q", namespace)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	d, ok := shared[abs]
	if !ok {
		if d, err = openDB(abs); err != nil {
			return nil, err
		}
		shared[abs] = d
	}
	d.refs++
	s := &Store{d: d, ns: namespace + "\x00", now: time.Now, stop: make(chan struct{})}
	s.wg.Add(1)
	go s.sweeper()
	return s, nil
}

func openDB(path string) (*db, error) {
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
	d := &db{path: path, log: slog.Default(), f: f, index: map[string]entry{}, overlay: map[string]pendingKey{},
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
	now := time.Now().UnixNano()
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
	// The tail of a write the process did not finish: never acknowledged, so dropping it
	// loses nothing anyone was told had been stored.
	d.log.Warn("store file: cutting off an unfinished write at its end", "file", d.path, "offset", first.Offset,
		"bytes", fi.Size()-first.Offset, "reason", first.Reason)
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

func recSize(key string, n int) int64 { return int64(1 + 8 + 4 + len(key) + 4 + n) }

// encodeFrame builds a frame (header + payload) of ops and each value's offset in the
// payload.
func encodeFrame(ops []op) ([]byte, []int) {
	n := 4
	for _, o := range ops {
		n += int(recSize(o.key, len(o.val)))
	}
	b := make([]byte, frameHeader, frameHeader+n)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ops)))
	voffs := make([]int, len(ops))
	for i, o := range ops {
		b = append(b, o.kind)
		b = binary.LittleEndian.AppendUint64(b, uint64(o.exp))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(o.key)))
		b = append(b, o.key...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(o.val)))
		voffs[i] = len(b) - frameHeader
		b = append(b, o.val...)
	}
	binary.LittleEndian.PutUint32(b[0:4], uint32(len(b)-frameHeader))
	binary.LittleEndian.PutUint32(b[4:8], crc32.Checksum(b[frameHeader:], crcTable))
	return b, voffs
}

func decodeFrame(p []byte) ([]op, []int, error) {
	if len(p) < 4 {
		return nil, nil, errors.New("short")
	}
	count := int(binary.LittleEndian.Uint32(p))
	pos := 4
	ops := make([]op, 0, min(count, 1<<16))
	voffs := make([]int, 0, cap(ops))
	for i := 0; i < count; i++ {
		if pos+1+8+4 > len(p) {
			return nil, nil, errors.New("record header past the end")
		}
		o := op{kind: p[pos], exp: int64(binary.LittleEndian.Uint64(p[pos+1:]))}
		kl := int(binary.LittleEndian.Uint32(p[pos+9:]))
		pos += 13
		if o.kind != opSet && o.kind != opDel {
			return nil, nil, fmt.Errorf("unknown record kind %d", o.kind)
		}
		if kl < 0 || pos+kl+4 > len(p) {
			return nil, nil, errors.New("key past the end")
		}
		o.key = string(p[pos : pos+kl])
		pos += kl
		vl := int(binary.LittleEndian.Uint32(p[pos:]))
		pos += 4
		if vl < 0 || pos+vl > len(p) {
			return nil, nil, errors.New("value past the end")
		}
		voffs = append(voffs, pos)
		o.val = p[pos : pos+vl : pos+vl] // only its length is used at load
		pos += vl
		ops = append(ops, o)
	}
	if pos != len(p) {
		return nil, nil, errors.New("trailing bytes")
	}
	return ops, voffs, nil
}

// enqueue queues ops as one frame; done is called (on the commit goroutine) once the
// frame is durable and visible, or failed. Later calls commit after it.
func (d *db) enqueue(ops []op, done func(error)) {
	d.qmu.Lock()
	err := d.enqueueLocked(ops, done)
	d.qmu.Unlock()
	if err != nil {
		done(err)
	}
}

// enqueueLocked is enqueue with d.qmu held; it does not call done on error.
func (d *db) enqueueLocked(ops []op, done func(error)) error {
	if d.closed || d.broken != nil {
		if d.broken != nil {
			return d.broken
		}
		return errClosed
	}
	frame, voffs := encodeFrame(ops)
	d.queue = append(d.queue, &call{frame: frame, ops: ops, voffs: voffs, done: done})
	for _, o := range ops {
		pk := d.overlay[o.key]
		pk.n++
		pk.del, pk.exp = o.kind == opDel, o.exp
		d.overlay[o.key] = pk
	}
	select { // under qmu, so close cannot close kick in between
	case d.kick <- struct{}{}:
	default:
	}
	return nil
}

var errClosed = errors.New("embedded store: closed")

func (d *db) loop() {
	defer close(d.stopped)
	for range d.kick {
		for {
			d.qmu.Lock()
			q := d.queue
			// Cap one group's size; the rest waits for the next round.
			total, n := 0, 0
			for n < len(q) && (n == 0 || total+len(q[n].frame) <= maxGroup) {
				total += len(q[n].frame)
				n++
			}
			d.queue = q[n:]
			if len(d.queue) == 0 {
				d.queue = nil
			}
			d.qmu.Unlock()
			if n == 0 {
				break
			}
			d.commit(q[:n], total)
		}
		d.maybeCompact()
	}
}

func (d *db) commit(group []*call, total int) {
	buf := group[0].frame
	if len(group) > 1 {
		buf = make([]byte, 0, total)
		for _, c := range group {
			buf = append(buf, c.frame...)
		}
	}
	base := d.size // only this goroutine changes size (and compaction, also here)
	// The group starts with a mark: once it is synced, damage in anything before it can
	// no longer pass for an unfinished write.
	mark := markFrame(base)
	var err error
	if len(buf) <= 64<<10 {
		buf = append(append(make([]byte, 0, len(mark)+len(buf)), mark...), buf...)
		_, err = d.f.WriteAt(buf, base)
	} else if _, err = d.f.WriteAt(mark, base); err == nil { // a large group is not copied
		_, err = d.f.WriteAt(buf, base+markLen)
	}
	d.hit("group-written")
	if err == nil {
		err = datasync(d.f)
	}
	d.hit("group-synced")
	if err != nil {
		// Undo the partial append so the file stays a sequence of whole frames.
		if terr := d.f.Truncate(base); terr != nil {
			d.qmu.Lock()
			d.broken = fmt.Errorf("store file %s: a failed write could not be undone (%v): restart tuft", d.path, terr)
			d.qmu.Unlock()
		}
		err = fmt.Errorf("store file %s: write: %w", d.path, err)
	} else {
		now := time.Now().UnixNano()
		d.mu.Lock()
		off := base + markLen
		d.sealed = false
		for _, c := range group {
			d.apply(c.ops, c.voffs, off+frameHeader, now)
			off += int64(len(c.frame))
		}
		d.size = off
		d.mu.Unlock()
	}
	d.qmu.Lock()
	for _, c := range group {
		for _, o := range c.ops {
			if pk := d.overlay[o.key]; pk.n <= 1 {
				delete(d.overlay, o.key)
			} else {
				pk.n--
				d.overlay[o.key] = pk
			}
		}
	}
	d.qmu.Unlock()
	for _, c := range group {
		c.done(err)
	}
}

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
	now := time.Now().UnixNano()
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

// --- store.Store ---

var errEmptyKey = errors.New("store: empty key")

func (s *Store) expiry(ttl time.Duration) int64 {
	if ttl <= 0 {
		return 0
	}
	return s.now().Add(ttl).UnixNano()
}

func (s *Store) alive(e entry) bool { return e.exp == 0 || s.now().UnixNano() < e.exp }

// write queues ops and waits for them to be durable.
func (s *Store) write(ctx context.Context, ops []op) error {
	ch := make(chan error, 1)
	s.d.enqueue(ops, func(err error) { ch <- err })
	// The write is queued and will commit even if ctx ends; waiting keeps Set's promise
	// that the value is durable when it returns.
	return <-ch
}

// Get implements store.Store.
func (s *Store) Get(_ context.Context, key string) ([]byte, error) {
	d := s.d
	d.mu.RLock()
	defer d.mu.RUnlock()
	e, ok := d.index[s.ns+key]
	if !ok || !s.alive(e) {
		return nil, store.ErrNotFound
	}
	v := make([]byte, e.n)
	if _, err := d.f.ReadAt(v, e.off); err != nil {
		return nil, fmt.Errorf("store file %s: read %q: %w", d.path, key, err)
	}
	return v, nil
}

// Set implements store.Store.
func (s *Store) Set(ctx context.Context, key string, v []byte, ttl time.Duration) error {
	if key == "" {
		return errEmptyKey
	}
	return s.write(ctx, []op{{kind: opSet, key: s.ns + key, val: v, exp: s.expiry(ttl)}})
}

// SetQueued implements store.Queuer through the group commit.
func (s *Store) SetQueued(_ context.Context, key string, v []byte, ttl time.Duration, done func(error)) {
	if key == "" {
		done(errEmptyKey)
		return
	}
	s.d.enqueue([]op{{kind: opSet, key: s.ns + key, val: v, exp: s.expiry(ttl)}}, done)
}

// SetNX implements store.Store. Queued writes count: a key being written is taken.
func (s *Store) SetNX(ctx context.Context, key string, v []byte, ttl time.Duration) (bool, error) {
	if key == "" {
		return false, errEmptyKey
	}
	d, k := s.d, s.ns+key
	ch := make(chan error, 1)
	d.qmu.Lock()
	taken := false
	if pk, ok := d.overlay[k]; ok {
		taken = !pk.del && (pk.exp == 0 || pk.exp > s.now().UnixNano())
	} else {
		d.mu.RLock()
		e, ok := d.index[k]
		d.mu.RUnlock()
		taken = ok && s.alive(e)
	}
	if taken {
		d.qmu.Unlock()
		return false, nil
	}
	// Enqueued under the same hold of qmu as the check: no other write of k slips in.
	err := d.enqueueLocked([]op{{kind: opSet, key: k, val: v, exp: s.expiry(ttl)}}, func(err error) { ch <- err })
	d.qmu.Unlock()
	if err != nil {
		return false, err
	}
	if err := <-ch; err != nil {
		return false, err
	}
	return true, nil
}

// Del implements store.Store.
func (s *Store) Del(ctx context.Context, keys ...string) error {
	var ops []op
	for _, k := range keys {
		if k != "" {
			ops = append(ops, op{kind: opDel, key: s.ns + k})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	return s.write(ctx, ops)
}

// Apply implements store.Store: one frame, so all or none of it survives a crash.
func (s *Store) Apply(ctx context.Context, ops []store.Op) error {
	out := make([]op, 0, len(ops))
	for _, o := range ops {
		if o.Key == "" {
			return errEmptyKey
		}
		if o.Value == nil {
			out = append(out, op{kind: opDel, key: s.ns + o.Key})
		} else {
			out = append(out, op{kind: opSet, key: s.ns + o.Key, val: o.Value, exp: s.expiry(o.TTL)})
		}
	}
	if len(out) == 0 {
		return nil
	}
	return s.write(ctx, out)
}

// Scan implements store.Store, in key order. fn runs outside any lock, so it may write.
func (s *Store) Scan(ctx context.Context, prefix string, fn func(string, []byte) error) error {
	d := s.d
	p := s.ns + prefix
	type kv struct {
		k string
		v []byte
	}
	var items []kv
	d.mu.RLock()
	keys := make([]string, 0)
	for k, e := range d.index {
		if strings.HasPrefix(k, p) && s.alive(e) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		e := d.index[k]
		v := make([]byte, e.n)
		if _, err := d.f.ReadAt(v, e.off); err != nil {
			d.mu.RUnlock()
			return fmt.Errorf("store file %s: read %q: %w", d.path, strings.TrimPrefix(k, s.ns), err)
		}
		items = append(items, kv{strings.TrimPrefix(k, s.ns), v})
	}
	d.mu.RUnlock()
	for _, it := range items {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(it.k, it.v); err != nil {
			return err
		}
	}
	return nil
}

// Clear implements store.Store: it deletes this namespace's keys only.
func (s *Store) Clear(ctx context.Context) error {
	d := s.d
	var ops []op
	d.mu.RLock()
	for k := range d.index {
		if strings.HasPrefix(k, s.ns) {
			ops = append(ops, op{kind: opDel, key: k})
		}
	}
	d.mu.RUnlock()
	if len(ops) == 0 {
		return nil
	}
	return s.write(ctx, ops)
}

// Kind implements store.Store.
func (s *Store) Kind() string { return "tuft-embedded" }

// Close implements store.Store.
func (s *Store) Close() error {
	select {
	case <-s.stop:
		return nil
	default:
		close(s.stop)
	}
	s.wg.Wait()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	s.d.refs--
	if s.d.refs > 0 {
		return nil
	}
	delete(shared, s.d.path)
	return s.d.close()
}

// sweeper drops expired keys from the index (their bytes go at the next compaction).
func (s *Store) sweeper() {
	defer s.wg.Done()
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			now := s.now().UnixNano()
			d := s.d
			d.mu.Lock()
			for k, e := range d.index {
				if strings.HasPrefix(k, s.ns) && e.exp != 0 && e.exp <= now {
					delete(d.index, k)
					d.live -= recSize(k, int(e.n))
				}
			}
			d.mu.Unlock()
		}
	}
}

var _ store.Store = (*Store)(nil)
var _ store.Queuer = (*Store)(nil)
