package logstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// Damage is a region of a store file that holds no intact frame: from Offset up to End,
// where the next intact frame starts (or the end of the file).
type Damage struct {
	Offset, End int64
	Reason      string
	// TornTail: the region is the unfinished last write of a crash (no mark follows
	// it), which opening the store cuts off; any other damage stops the start.
	TornTail bool
	// Suspect: a torn tail whose first frame is there in full with a bad checksum (not a
	// write cut short): it may have held acknowledged writes (tail.go).
	Suspect bool
	// Keys are the keys the damaged bytes still name, as far as they can be read (the
	// records whose latest write may be lost), "namespace/key".
	Keys []string
}

// walkResult is what walk learned about a file.
type walkResult struct {
	frames, records, marks int
	damage                 []Damage
	markAfterDamage        bool // an intact mark follows the first damaged region
	intactAfterDamage      bool // an intact frame follows it
	lastIsMark             bool // the file ends with an intact mark
}

func (w *walkResult) damaged() bool { return len(w.damage) > 0 }

// tornTail reports whether the file's damage can only be an unfinished last write: no
// mark (no later completed write) follows it, and it is not larger than one write. A file
// with no mark at all was written by an older version that wrote none: there, intact
// frames after the damage are taken as corruption too.
func (w *walkResult) tornTail(size int64) bool {
	if !w.damaged() || w.markAfterDamage || size-w.damage[0].Offset > maxTornTail {
		return false
	}
	return w.marks > 0 || !w.intactAfterDamage
}

// walk reads a store file (after the header) frame by frame, calling frame for every
// intact frame in file order, and records the damaged regions in between in w.
func walk(f io.ReaderAt, size int64, frame func(off int64, payload []byte, ops []op, voffs []int) error, w *walkResult) error {
	pos := int64(len(magic))
	r := bufio.NewReaderSize(io.NewSectionReader(f, pos, size-pos), 1<<20)
	var hdr [frameHeader]byte
	for pos < size {
		bad := ""
		var payload []byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			bad = "a truncated frame header"
		} else if n := int64(binary.LittleEndian.Uint32(hdr[:4])); pos+frameHeader+n > size {
			bad = "a frame that runs past the end of the file"
		} else {
			payload = make([]byte, n)
			if _, err := io.ReadFull(r, payload); err != nil {
				bad = "an unreadable frame"
			} else if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(hdr[4:]) {
				bad = "a frame whose checksum does not match"
			}
		}
		var ops []op
		var voffs []int
		if bad == "" {
			var err error
			if ops, voffs, err = decodeFrame(payload); err != nil {
				bad = "a malformed frame (" + err.Error() + ")"
			}
		}
		if bad != "" {
			next := nextIntact(f, pos+1, size)
			w.damage = append(w.damage, Damage{Offset: pos, End: next, Reason: bad, Keys: damagedKeys(f, pos, next)})
			w.lastIsMark = false
			pos = next
			r.Reset(io.NewSectionReader(f, pos, size-pos))
			continue
		}
		mark := isMark(ops, pos)
		if len(w.damage) > 0 {
			w.intactAfterDamage = true
			w.markAfterDamage = w.markAfterDamage || mark
		}
		w.frames++
		if mark {
			w.marks++
		} else {
			w.records += len(ops)
		}
		w.lastIsMark = mark
		if err := frame(pos, payload, ops, voffs); err != nil {
			return err
		}
		pos += frameHeader + int64(len(payload))
	}
	return nil
}

// nextIntact finds the first offset at or after from where an intact frame starts, or
// size. It scans a window at a time, checking the cheap parts of a frame (length, the
// first record's kind and key length) before its checksum.
func nextIntact(f io.ReaderAt, from, size int64) int64 {
	const win = 1 << 20
	const look = frameHeader + 4 + 13 // header, record count, first record's header
	buf := make([]byte, win+look)
	for base := from; base < size; base += win {
		n, _ := f.ReadAt(buf[:min(int64(len(buf)), size-base)], base)
		for i := 0; i < min(win, n); i++ {
			q := base + int64(i)
			if q+frameHeader+4 > size || i+look > n {
				if i+look > n && base+int64(n) < size {
					break // the next window covers it
				}
				if q+frameHeader+4 > size {
					return size
				}
			}
			if i+look > n {
				continue
			}
			l := int64(binary.LittleEndian.Uint32(buf[i:]))
			if l < 4+13 || q+frameHeader+l > size {
				continue
			}
			p := buf[i+frameHeader:]
			count := binary.LittleEndian.Uint32(p)
			kind := p[4]
			kl := int64(binary.LittleEndian.Uint32(p[4+9:]))
			if count == 0 || int64(count)*13 > l || (kind != opSet && kind != opDel) || kl > l {
				continue
			}
			var payload []byte
			if i+frameHeader+int(l) <= n {
				payload = buf[i+frameHeader : i+frameHeader+int(l)]
			} else {
				payload = make([]byte, l)
				if _, err := f.ReadAt(payload, q+frameHeader); err != nil {
					continue
				}
			}
			if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(buf[i+4:]) {
				continue
			}
			if _, _, err := decodeFrame(payload); err == nil {
				return q
			}
		}
	}
	return size
}

// damagedKeys reads what keys a damaged region still names, best effort: a frame whose
// header survived is decoded without its checksum.
func damagedKeys(f io.ReaderAt, off, end int64) []string {
	if end-off < frameHeader || end-off > 64<<20 {
		return nil
	}
	b := make([]byte, end-off)
	if _, err := f.ReadAt(b, off); err != nil {
		return nil
	}
	var keys []string
	seen := map[string]bool{}
	for len(b) >= frameHeader {
		n := int(binary.LittleEndian.Uint32(b))
		if n > len(b)-frameHeader {
			break
		}
		ops, _, err := decodeFrame(b[frameHeader : frameHeader+n])
		if err != nil {
			break
		}
		for _, o := range ops {
			if o.key == markKey {
				continue
			}
			k := strings.Replace(o.key, "\x00", "/", 1)
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		b = b[frameHeader+n:]
	}
	sort.Strings(keys)
	return keys
}

// Report is what Check found in a store file.
type Report struct {
	Path    string
	Size    int64
	Frames  int // intact frames, marks included
	Records int // writes in them
	Marks   int
	Damage  []Damage
	// InUse: another process (a running tuft) holds the file, which may be writing its
	// last frame as it is read.
	InUse bool
	// CutTails are the ends an open cut off, kept beside the file (tail.go) until an
	// operator removes them.
	CutTails []CutTail
}

// Suspect reports a cut-off tail that was written in full (a flipped bit or a lost page,
// not an unfinished write): it may have held acknowledged writes.
func (r *Report) Suspect() bool {
	for _, d := range r.Damage {
		if d.Suspect {
			return true
		}
	}
	for _, c := range r.CutTails {
		if !c.Torn {
			return true
		}
	}
	return false
}

// Corrupt reports damage that stops the start (anything but a torn last write).
func (r *Report) Corrupt() bool {
	for _, d := range r.Damage {
		if !d.TornTail {
			return true
		}
	}
	return false
}

// Check reads a store file and reports its damage without changing anything.
func Check(path string) (*Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("store file %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("store file %s: %w", path, err)
	}
	rep := &Report{Path: path, Size: fi.Size()}
	if rep.CutTails, err = CutTails(path); err != nil {
		return nil, fmt.Errorf("store file %s: %w", path, err)
	}
	if rw, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
		if err := lockFile(rw); errors.Is(err, errLocked) {
			rep.InUse = true
		} else if err == nil {
			_ = unlockFile(rw)
		}
		rw.Close()
	}
	if fi.Size() == 0 {
		return rep, nil
	}
	if err := checkMagic(f, path); err != nil {
		return nil, err
	}
	var w walkResult
	if err := walk(f, fi.Size(), func(int64, []byte, []op, []int) error { return nil }, &w); err != nil {
		return nil, fmt.Errorf("store file %s: %w", path, err)
	}
	rep.Frames, rep.Records, rep.Marks, rep.Damage = w.frames, w.records, w.marks, w.damage
	if w.tornTail(fi.Size()) {
		last := &rep.Damage[len(rep.Damage)-1]
		last.TornTail = true
		_, torn := classifyTail(tailHead(f, last.Offset, fi.Size()), last.Offset)
		last.Suspect = !torn
	}
	return rep, nil
}

// RepairReport is what Repair did.
type RepairReport struct {
	Report
	KeptFrames  int
	KeptRecords int
	// DamagedFile holds the damaged bytes, region after region in file order (see
	// Report.Damage for where each came from); DamagedBytes is its size.
	DamagedFile  string
	DamagedBytes int64
}

// Repair rewrites a damaged store file with every intact frame, in order, and moves the
// damaged bytes aside to <path>.damaged-<time>. A record whose latest write was in a
// damaged frame comes back with its previous value (or not at all); Damage.Keys names
// those that could be read. The store must not be in use.
func Repair(path string) (*RepairReport, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("store file %s: %w", path, err)
	}
	defer f.Close()
	if err := lockFile(f); err != nil {
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("store file %s is in use by another process: stop tuft first", path)
		}
		return nil, fmt.Errorf("store file %s: lock: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := checkMagic(f, path); err != nil {
		return nil, err
	}
	tmp := path + ".repair"
	nf, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp) // after a successful rename there is nothing left to remove
	bw := bufio.NewWriterSize(nf, 1<<20)
	bw.WriteString(magic)
	pos := int64(len(magic))
	rep := &RepairReport{Report: Report{Path: path, Size: fi.Size()}}
	var w walkResult
	err = walk(f, fi.Size(), func(off int64, payload []byte, ops []op, _ []int) error {
		if isMark(ops, off) {
			return nil // marks record their own offset: new ones are written below
		}
		var hdr [frameHeader]byte
		binary.LittleEndian.PutUint32(hdr[:4], uint32(len(payload)))
		binary.LittleEndian.PutUint32(hdr[4:], crc32.Checksum(payload, crcTable))
		bw.Write(hdr[:])
		_, err := bw.Write(payload)
		pos += frameHeader + int64(len(payload))
		rep.KeptFrames++
		rep.KeptRecords += len(ops)
		return err
	}, &w)
	if err == nil {
		_, err = bw.Write(markFrame(pos))
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = nf.Sync()
	}
	if err != nil {
		nf.Close()
		return nil, fmt.Errorf("store file %s: write the repaired copy: %w", path, err)
	}
	rep.Frames, rep.Records, rep.Marks, rep.Damage = w.frames, w.records, w.marks, w.damage
	if w.tornTail(fi.Size()) {
		rep.Damage[len(rep.Damage)-1].TornTail = true
	}
	if len(w.damage) == 0 {
		nf.Close()
		return rep, nil // nothing to repair
	}
	// The damaged bytes go aside first: once the repaired copy replaces the file, they
	// exist nowhere else.
	rep.DamagedFile = fmt.Sprintf("%s.damaged-%s", path, time.Now().UTC().Format("20060102T150405Z"))
	df, err := os.OpenFile(rep.DamagedFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		nf.Close()
		return nil, fmt.Errorf("store file %s: %w", path, err)
	}
	for _, d := range w.damage {
		n, err := io.Copy(df, io.NewSectionReader(f, d.Offset, d.End-d.Offset))
		rep.DamagedBytes += n
		if err != nil {
			df.Close()
			nf.Close()
			return nil, fmt.Errorf("store file %s: save the damaged bytes: %w", path, err)
		}
	}
	if err := errors.Join(df.Sync(), df.Close()); err != nil {
		nf.Close()
		return nil, fmt.Errorf("store file %s: save the damaged bytes: %w", path, err)
	}
	if err := lockFile(nf); err != nil {
		nf.Close()
		return nil, err
	}
	cur, replaced, err := replaceFile(tmp, path, nf, f)
	if cur != nil && cur != f {
		cur.Close()
	}
	if !replaced {
		return nil, fmt.Errorf("store file %s: replace it with the repaired copy: %w", path, err)
	}
	if err := syncDir(path); err != nil {
		return nil, fmt.Errorf("store file %s: %w", path, err)
	}
	return rep, nil
}
