package futures

import (
	"crypto/rand"
	"strings"
	"time"
)

// idAlphabet is base32 in ASCII order, so ids compare like the times they start with.
const idAlphabet = "234567abcdefghijklmnopqrstuvwxyz"

// idLen is the length of an id after "req_".
const idLen = 26

// newID returns "req_" + 10 characters of the current time in milliseconds + 16
// random characters (80 bits). Ids sort by creation time, and the time tells a restarted
// process which unknown ids an earlier process handed out (see lostFuture).
func newID() string { return newIDAt(time.Now()) }

// newIDAt is newID with the time given.
func newIDAt(now time.Time) string {
	b := make([]byte, idLen)
	if _, err := rand.Read(b[10:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	ms := uint64(now.UnixMilli())
	for i := 9; i >= 0; i-- {
		b[i] = idAlphabet[ms&31]
		ms >>= 5
	}
	for i := 10; i < len(b); i++ {
		b[i] = idAlphabet[b[i]&31]
	}
	return "req_" + string(b)
}

// idTime decodes the creation time newID put in an id.
func idTime(id string) (time.Time, bool) {
	s, ok := strings.CutPrefix(id, "req_")
	if !ok || len(s) != idLen {
		return time.Time{}, false
	}
	var ms uint64
	for i := 0; i < 10; i++ {
		d := strings.IndexByte(idAlphabet, s[i])
		if d < 0 {
			return time.Time{}, false
		}
		ms = ms<<5 | uint64(d)
	}
	return time.UnixMilli(int64(ms)), true
}
