package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The file format: a magic header, then frames (a payload length, its CRC-32C, then the
// payload: one or more ops), some of them marks.

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
