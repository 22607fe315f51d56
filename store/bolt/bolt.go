// Package bolt is the embedded default store: one crash-safe file (bbolt: copy-on-write
// B+tree, fsync on every commit). Concurrent writers are grouped into one transaction by
// a committer goroutine (group commit): writes queue while a commit is in flight and the
// next commit takes them all, so many small writes share one fsync without a timer.
package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bbolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/tuft-go/tuft/store"
)

// Store is a bbolt-backed store.Store; each namespace is one bucket.
type Store struct {
	db     *bbolt.DB
	gc     *committer
	path   string
	bucket []byte
	now    func() time.Time
	stop   chan struct{}
	wg     sync.WaitGroup
	sweep  time.Duration
}

// Option adjusts Open.
type Option func(*Store)

// WithSweepInterval sets how often expired keys are removed from the file.
func WithSweepInterval(d time.Duration) Option {
	return func(s *Store) { s.sweep = d }
}

// shared lets several namespaces of one process use one file: bbolt locks a file per
// open handle, so the handle is shared and reference-counted.
var (
	sharedMu sync.Mutex
	shared   = map[string]*sharedDB{}
)

type sharedDB struct {
	db   *bbolt.DB
	refs int
	gc   *committer
}

func openShared(path string) (*bbolt.DB, *committer, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, nil, err
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s, ok := shared[abs]; ok {
		s.refs++
		return s.db, s.gc, nil
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, nil, fmt.Errorf("store %s: %w", path, err)
	}
	// The freelist is not written on every commit (it is rebuilt by scanning on open
	// after an unclean stop): fewer pages per commit; a hashmap freelist keeps
	// allocation cheap as the file grows.
	db, err := bbolt.Open(abs, 0o600, &bbolt.Options{Timeout: 2 * time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, nil, fmt.Errorf("store file %s is locked by another process (is another tuft running?)", path)
		}
		return nil, nil, fmt.Errorf("store file %s: %w", path, err)
	}
	gc := newCommitter(db)
	shared[abs] = &sharedDB{db: db, refs: 1, gc: gc}
	return db, gc, nil
}

func closeShared(db *bbolt.DB) error {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	for k, s := range shared {
		if s.db == db {
			s.refs--
			if s.refs > 0 {
				return nil
			}
			delete(shared, k)
			s.gc.close()
		}
	}
	return db.Close()
}

// Open opens (creating if needed) the store file at path and the namespace's bucket.
func Open(path, namespace string, opts ...Option) (*Store, error) {
	if namespace == "" {
		return nil, errors.New("bolt store: empty namespace")
	}
	db, gc, err := openShared(path)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, gc: gc, path: path, bucket: []byte(namespace), now: time.Now, stop: make(chan struct{}), sweep: time.Minute}
	for _, o := range opts {
		o(s)
	}
	if err := db.Update(func(tx *bbolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(s.bucket)
		return err
	}); err != nil {
		closeShared(db)
		return nil, fmt.Errorf("store file %s: %w", path, err)
	}
	s.wg.Add(1)
	go s.sweeper()
	return s, nil
}

// The value envelope: 8 bytes of expiry (unix nanoseconds, 0 = none), then the value.
func wrap(v []byte, exp int64) []byte {
	b := make([]byte, 8+len(v))
	binary.BigEndian.PutUint64(b, uint64(exp))
	copy(b[8:], v)
	return b
}

// unwrap decodes an envelope; ok is false for a corrupt one.
func unwrap(b []byte) (v []byte, exp int64, ok bool) {
	if len(b) < 8 {
		return nil, 0, false
	}
	return b[8:], int64(binary.BigEndian.Uint64(b)), true
}

func (s *Store) expiry(ttl time.Duration) int64 {
	if ttl <= 0 {
		return 0
	}
	return s.now().Add(ttl).UnixNano()
}

func (s *Store) alive(exp int64) bool { return exp == 0 || s.now().UnixNano() < exp }

var errEmptyKey = errors.New("store: empty key")

// Get implements store.Store.
func (s *Store) Get(_ context.Context, key string) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bbolt.Tx) error {
		raw := tx.Bucket(s.bucket).Get([]byte(key))
		if raw == nil {
			return store.ErrNotFound
		}
		v, exp, ok := unwrap(raw)
		if !ok {
			return fmt.Errorf("store file %s: key %q has a corrupt value", s.path, key)
		}
		if !s.alive(exp) {
			return store.ErrNotFound
		}
		out = append([]byte(nil), v...)
		return nil
	})
	return out, err
}

// Set implements store.Store.
func (s *Store) Set(_ context.Context, key string, v []byte, ttl time.Duration) error {
	if key == "" {
		return errEmptyKey
	}
	return s.gc.do(func(tx *bbolt.Tx) error {
		return tx.Bucket(s.bucket).Put([]byte(key), wrap(v, s.expiry(ttl)))
	})
}

// SetQueued implements store.Queuer through the group commit.
func (s *Store) SetQueued(_ context.Context, key string, v []byte, ttl time.Duration, done func(error)) {
	if key == "" {
		done(errEmptyKey)
		return
	}
	val := wrap(v, s.expiry(ttl))
	s.gc.enqueue(func(tx *bbolt.Tx) error {
		return tx.Bucket(s.bucket).Put([]byte(key), val)
	}, done)
}

// SetNX implements store.Store.
func (s *Store) SetNX(_ context.Context, key string, v []byte, ttl time.Duration) (bool, error) {
	if key == "" {
		return false, errEmptyKey
	}
	wrote := false
	err := s.gc.do(func(tx *bbolt.Tx) error {
		wrote = false // the function may run twice (see committer.do)
		b := tx.Bucket(s.bucket)
		if raw := b.Get([]byte(key)); raw != nil {
			if _, exp, ok := unwrap(raw); ok && s.alive(exp) {
				return nil
			}
		}
		wrote = true
		return b.Put([]byte(key), wrap(v, s.expiry(ttl)))
	})
	return wrote, err
}

// Del implements store.Store.
func (s *Store) Del(_ context.Context, keys ...string) error {
	return s.gc.do(func(tx *bbolt.Tx) error {
		b := tx.Bucket(s.bucket)
		for _, k := range keys {
			if k == "" {
				continue
			}
			if err := b.Delete([]byte(k)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Scan implements store.Store, in key order. fn runs outside the read transaction, so
// it may write to the store.
func (s *Store) Scan(ctx context.Context, prefix string, fn func(string, []byte) error) error {
	type kv struct {
		k string
		v []byte
	}
	var items []kv
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(s.bucket).Cursor()
		p := []byte(prefix)
		for k, raw := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, raw = c.Next() {
			v, exp, ok := unwrap(raw)
			if !ok {
				return fmt.Errorf("store file %s: key %q has a corrupt value", s.path, k)
			}
			if s.alive(exp) {
				items = append(items, kv{string(k), append([]byte(nil), v...)})
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
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

// Apply implements store.Store: one transaction.
func (s *Store) Apply(_ context.Context, ops []store.Op) error {
	for _, op := range ops {
		if op.Key == "" {
			return errEmptyKey
		}
	}
	return s.gc.do(func(tx *bbolt.Tx) error {
		b := tx.Bucket(s.bucket)
		for _, op := range ops {
			var err error
			if op.Value == nil {
				err = b.Delete([]byte(op.Key))
			} else {
				err = b.Put([]byte(op.Key), wrap(op.Value, s.expiry(op.TTL)))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// Clear implements store.Store: it empties this namespace's bucket only.
func (s *Store) Clear(context.Context) error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		if err := tx.DeleteBucket(s.bucket); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return err
		}
		_, err := tx.CreateBucket(s.bucket)
		return err
	})
}

// Kind implements store.Store.
func (s *Store) Kind() string { return "bbolt" }

// Close implements store.Store.
func (s *Store) Close() error {
	select {
	case <-s.stop:
		return nil
	default:
		close(s.stop)
	}
	s.wg.Wait()
	return closeShared(s.db)
}

func (s *Store) sweeper() {
	defer s.wg.Done()
	t := time.NewTicker(s.sweep)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			_ = s.purge()
		}
	}
}

// purge deletes expired keys.
func (s *Store) purge() error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(s.bucket)
		c := b.Cursor()
		var dead [][]byte
		for k, raw := c.First(); k != nil; k, raw = c.Next() {
			if _, exp, ok := unwrap(raw); ok && !s.alive(exp) {
				dead = append(dead, append([]byte(nil), k...))
			}
		}
		for _, k := range dead {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}
