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
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tuft-go/tuft/store"
)

// Store is one namespace of an embedded store file.
type Store struct {
	d    *db
	ns   string
	now  func() time.Time
	stop chan struct{}
	wg   sync.WaitGroup
}

// Option configures Open.
type Option func(*options)

type options struct{ now func() time.Time }

// WithClock makes the store tell time by now (default time.Now) for expiries. The file's
// own work (loading, committing and compacting, which drop expired values) goes by the
// clock of the Open that opened the file first in this process.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// Open opens (creating if needed) the store file at path and returns its namespace.
func Open(path, namespace string, opts ...Option) (*Store, error) {
	o := options{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
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
		if d, err = openDB(abs, o.now); err != nil {
			return nil, err
		}
		shared[abs] = d
	}
	d.refs++
	s := &Store{d: d, ns: namespace + "\x00", now: o.now, stop: make(chan struct{})}
	s.wg.Add(1)
	go s.sweeper()
	return s, nil
}

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
