package bolt

import (
	"errors"
	"sync"

	bbolt "go.etcd.io/bbolt"
)

// errClosed is returned for writes after the store file was closed.
var errClosed = errors.New("bolt store: closed")

// committer runs queued write functions in as few transactions as possible: while one
// commit (and its fsync) is in flight the next writes queue up, then all of them share
// the next transaction. Unlike bbolt's Batch there is no timer to wait for, and writes
// commit in the order they were queued.
type committer struct {
	db      *bbolt.DB
	mu      sync.Mutex
	queue   []call
	kick    chan struct{}
	stopped chan struct{}
	closed  bool
}

type call struct {
	fn   func(*bbolt.Tx) error
	done func(error)
}

func newCommitter(db *bbolt.DB) *committer {
	c := &committer{db: db, kick: make(chan struct{}, 1), stopped: make(chan struct{})}
	go c.loop()
	return c
}

// do runs fn inside a write transaction and returns once that transaction is durable.
// fn may run more than once (if another function in its group fails, each is retried
// alone), so it must only depend on the transaction it is given.
func (c *committer) do(fn func(*bbolt.Tx) error) error {
	ch := make(chan error, 1)
	c.enqueue(fn, func(err error) { ch <- err })
	return <-ch
}

// enqueue queues fn; done reports its commit (on the commit goroutine). A write queued
// after this returns commits in the same transaction or a later one.
func (c *committer) enqueue(fn func(*bbolt.Tx) error, done func(error)) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		done(errClosed)
		return
	}
	c.queue = append(c.queue, call{fn, done})
	select { // under mu, so close cannot close kick in between
	case c.kick <- struct{}{}:
	default:
	}
	c.mu.Unlock()
}

func (c *committer) loop() {
	defer close(c.stopped)
	for range c.kick {
		for {
			c.mu.Lock()
			q := c.queue
			c.queue = nil
			c.mu.Unlock()
			if len(q) == 0 {
				break
			}
			c.commit(q)
		}
	}
}

func (c *committer) commit(q []call) {
	err := c.db.Update(func(tx *bbolt.Tx) error {
		for _, cl := range q {
			if err := cl.fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || len(q) == 1 {
		for _, cl := range q {
			cl.done(err)
		}
		return
	}
	// One function failed and rolled the group back: run each alone so only the
	// failing one reports an error.
	for _, cl := range q {
		cl.done(c.db.Update(cl.fn))
	}
}

// close commits what is queued and stops the loop; later writes get errClosed.
func (c *committer) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	close(c.kick)
	<-c.stopped
}
