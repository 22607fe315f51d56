package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The end of a file that opening the store cuts off (damage with no mark after it) is
// never dropped: its bytes go to <path>.damaged-<time>-tail-at-<offset> beside the file
// first, and `tuft store check` reports every such file until an operator removes it.
// The format tells an honest torn write from a bit flip as far as it can: a first
// damaged frame that runs past the end of the file is an unfinished write (a crash in
// the middle of it: nothing in it was acknowledged); one whose whole length is there
// but whose checksum does not match was written in full, and may have been
// acknowledged (the last group before a SIGKILL is synced and acknowledged, and no
// mark follows it until the next write), so a flipped bit or a lost page there may
// have lost acknowledged writes.

// tailMark names the kept-aside tails among the files beside a store file.
const tailMark = "-tail-at-"

// CutTail is the end of a store file that opening the store cut off, kept aside.
type CutTail struct {
	File   string // where its bytes are now
	Offset int64  // where it began in the store file
	Bytes  int64
	Reason string
	// Torn: the first damaged frame runs past the end of the file, the unfinished write
	// of a crash, which nobody was told had been stored (or the tail is one damaged mark,
	// which holds no write). Otherwise the frame was there in full with a checksum that
	// does not match: it may have held acknowledged writes.
	Torn bool
	// Keys are the keys the kept bytes still name, as far as they can be read.
	Keys []string
}

// classifyTail says what the first frame of a cut tail is (b starts at a frame, at file
// offset off).
func classifyTail(b []byte, off int64) (reason string, torn bool) {
	if len(b) < frameHeader {
		return "a truncated frame header (an unfinished write)", true
	}
	n := int64(binary.LittleEndian.Uint32(b[:4]))
	if frameHeader+n > int64(len(b)) {
		return "a frame that runs past the end of the file (an unfinished write)", true
	}
	payload := b[frameHeader : frameHeader+n]
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(b[4:8]) {
		// The mark written at off (a store's closing mark), with a byte changed, carries
		// no write: losing it loses nothing.
		if int64(len(b)) == markLen && bytesDiffer(b, markFrame(off)) <= 1 {
			return "a damaged mark at the end (it holds no writes)", true
		}
		return "a complete frame whose checksum does not match (a flipped bit or a lost page; it may have been acknowledged)", false
	}
	if _, _, err := decodeFrame(payload); err != nil {
		return "a complete frame that does not decode (" + err.Error() + "; it may have been acknowledged)", false
	}
	return "intact frames after damage that was not at the frame start", false
}

// keepTail copies f's bytes from off to size into a new file beside path, synced, and
// returns its name.
func keepTail(f *os.File, path string, off, size int64, now time.Time) (string, error) {
	base := fmt.Sprintf("%s.damaged-%s%s%d", path, now.UTC().Format("20060102T150405Z"), tailMark, off)
	name := base
	var df *os.File
	for i := 1; ; i++ {
		var err error
		df, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || i > 100 {
			return "", err
		}
		name = fmt.Sprintf("%s.%d", base, i)
	}
	_, err := io.Copy(df, io.NewSectionReader(f, off, size-off))
	if err = errors.Join(err, df.Sync(), df.Close()); err != nil {
		_ = os.Remove(name)
		return "", err
	}
	if err := syncDir(path); err != nil {
		return "", err
	}
	return name, nil
}

// CutTails lists the cut-off tails kept beside the store file at path, oldest first.
func CutTails(path string) ([]CutTail, error) {
	matches, err := filepath.Glob(path + ".damaged-*" + tailMark + "*")
	if err != nil {
		return nil, err
	}
	sort.Strings(matches)
	var out []CutTail
	for _, m := range matches {
		at := m[strings.LastIndex(m, tailMark)+len(tailMark):]
		if i := strings.IndexByte(at, '.'); i >= 0 {
			at = at[:i]
		}
		off, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			continue // not a name keepTail writes
		}
		b, err := os.ReadFile(m)
		if err != nil {
			return nil, fmt.Errorf("cut-off tail %s: %w", m, err)
		}
		reason, torn := classifyTail(b, off)
		rd := bytesReaderAt(b)
		out = append(out, CutTail{File: m, Offset: off, Bytes: int64(len(b)), Reason: reason, Torn: torn, Keys: damagedKeys(rd, 0, int64(len(b)))})
	}
	return out, nil
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// tailHead reads the first frame of the damage at off for classifyTail: the whole frame
// when the file holds it, else what there is of its header.
func tailHead(f io.ReaderAt, off, size int64) []byte {
	hdr := make([]byte, min(size-off, frameHeader))
	n, _ := f.ReadAt(hdr, off)
	if n < frameHeader {
		return hdr[:n]
	}
	total := frameHeader + int64(binary.LittleEndian.Uint32(hdr[:4]))
	if off+total > size {
		return hdr
	}
	b := make([]byte, total)
	n, _ = f.ReadAt(b, off)
	return b[:n]
}

// bytesDiffer counts the positions where a and b (of one length) differ.
func bytesDiffer(a, b []byte) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}
