package memory

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tuft-go/tuft/store"
)

type item struct {
	v   []byte
	exp time.Time // zero: no expiry
}

// Store is a map-backed store.Store.
type Store struct {
	mu  sync.RWMutex
	m   map[string]item
	now func() time.Time
}

// Option configures New.
type Option func(*Store)

// WithClock makes the store tell time by now (default time.Now) for expiries.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{m: map[string]item{}, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	return s
}

func (s *Store) live(it item, now time.Time) bool { return it.exp.IsZero() || now.Before(it.exp) }

func exp(now time.Time, ttl time.Duration) time.Time {
	if ttl <= 0 {
		return time.Time{}
	}
	return now.Add(ttl)
}

var errEmptyKey = errors.New("store: empty key")

// Get implements store.Store.
func (s *Store) Get(_ context.Context, key string) ([]byte, error) {
	s.mu.RLock()
	it, ok := s.m[key]
	s.mu.RUnlock()
	if !ok || !s.live(it, s.now()) {
		return nil, store.ErrNotFound
	}
	return append([]byte(nil), it.v...), nil
}

// Set implements store.Store.
func (s *Store) Set(_ context.Context, key string, v []byte, ttl time.Duration) error {
	if key == "" {
		return errEmptyKey
	}
	s.mu.Lock()
	s.m[key] = item{v: append([]byte(nil), v...), exp: exp(s.now(), ttl)}
	s.mu.Unlock()
	return nil
}

// SetNX implements store.Store.
func (s *Store) SetNX(_ context.Context, key string, v []byte, ttl time.Duration) (bool, error) {
	if key == "" {
		return false, errEmptyKey
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if it, ok := s.m[key]; ok && s.live(it, now) {
		return false, nil
	}
	s.m[key] = item{v: append([]byte(nil), v...), exp: exp(now, ttl)}
	return true, nil
}

// Del implements store.Store.
func (s *Store) Del(_ context.Context, keys ...string) error {
	s.mu.Lock()
	for _, k := range keys {
		delete(s.m, k)
	}
	s.mu.Unlock()
	return nil
}

// Scan implements store.Store, in key order.
func (s *Store) Scan(ctx context.Context, prefix string, fn func(string, []byte) error) error {
	s.mu.RLock()
	now := s.now()
	var keys []string
	for k, it := range s.m {
		if strings.HasPrefix(k, prefix) && s.live(it, now) {
			keys = append(keys, k)
		}
	}
	s.mu.RUnlock()
	sort.Strings(keys)
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		v, err := s.Get(ctx, k)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// Apply implements store.Store: all ops under one lock.
func (s *Store) Apply(_ context.Context, ops []store.Op) error {
	for _, op := range ops {
		if op.Key == "" {
			return errEmptyKey
		}
	}
	s.mu.Lock()
	now := s.now()
	for _, op := range ops {
		if op.Value == nil {
			delete(s.m, op.Key)
		} else {
			s.m[op.Key] = item{v: append([]byte(nil), op.Value...), exp: exp(now, op.TTL)}
		}
	}
	s.mu.Unlock()
	return nil
}

// Clear implements store.Store.
func (s *Store) Clear(context.Context) error {
	s.mu.Lock()
	s.m = map[string]item{}
	s.mu.Unlock()
	return nil
}

// Kind implements store.Store.
func (s *Store) Kind() string { return "memory" }

// Close implements store.Store.
func (s *Store) Close() error { return nil }
