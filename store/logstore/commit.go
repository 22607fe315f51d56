package logstore

import (
	"errors"
	"fmt"
)

// Group commit: writers queue frames, one goroutine appends each group with one write
// and one fdatasync, then makes it visible and answers the writers.

// call is one queued frame and what to tell its writer.
type call struct {
	frame []byte
	ops   []op
	voffs []int // each op's value offset within frame
	done  func(error)
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
		now := d.now().UnixNano()
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
