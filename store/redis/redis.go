package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/telemetry"
)

// Store is a Redis-backed store.Store.
type Store struct {
	c   *redis.Client
	ns  string
	url string
}

// Open connects to url (redis://, rediss:// or unix://) and pings it. Its spans and
// measurements go to the providers of opts (default: the globals).
func Open(ctx context.Context, rawURL, namespace string, opts ...telemetry.Option) (*Store, error) {
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis_url %s: %w", redact(rawURL), err)
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = 3*time.Second, 3*time.Second, 3*time.Second
	c := redis.NewClient(opt)
	c.AddHook(newHook(opts...))
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis at %s is not reachable: %w", redact(rawURL), err)
	}
	return &Store{c: c, ns: namespace + ":", url: redact(rawURL)}, nil
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	if p.User != nil {
		p.User = url.User("***")
	}
	return p.String()
}

var errEmptyKey = errors.New("store: empty key")

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := s.c.Get(ctx, s.ns+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, store.ErrNotFound
	}
	return b, err
}

// Set implements store.Store.
func (s *Store) Set(ctx context.Context, key string, v []byte, ttl time.Duration) error {
	if key == "" {
		return errEmptyKey
	}
	return s.c.Set(ctx, s.ns+key, v, ttl).Err()
}

// SetNX implements store.Store.
func (s *Store) SetNX(ctx context.Context, key string, v []byte, ttl time.Duration) (bool, error) {
	if key == "" {
		return false, errEmptyKey
	}
	return s.c.SetNX(ctx, s.ns+key, v, ttl).Result()
}

// Del implements store.Store.
func (s *Store) Del(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	full := make([]string, 0, len(keys))
	for _, k := range keys {
		if k != "" {
			full = append(full, s.ns+k)
		}
	}
	return s.c.Del(ctx, full...).Err()
}

// globEscape makes a prefix literal inside a MATCH pattern.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		switch r {
		case '*', '?', '[', ']', '\\', '^':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Scan implements store.Store (unordered).
func (s *Store) Scan(ctx context.Context, prefix string, fn func(string, []byte) error) error {
	it := s.c.Scan(ctx, 0, globEscape(s.ns+prefix)+"*", 500).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		vals, err := s.c.MGet(ctx, batch...).Result()
		if err != nil {
			return err
		}
		for i, v := range vals {
			str, ok := v.(string)
			if !ok { // expired or deleted between SCAN and MGET
				continue
			}
			if err := fn(strings.TrimPrefix(batch[i], s.ns), []byte(str)); err != nil {
				return err
			}
		}
		batch = batch[:0]
		return nil
	}
	for it.Next(ctx) {
		batch = append(batch, it.Val())
		if len(batch) == 500 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	return flush()
}

// Apply implements store.Store with MULTI/EXEC.
func (s *Store) Apply(ctx context.Context, ops []store.Op) error {
	for _, op := range ops {
		if op.Key == "" {
			return errEmptyKey
		}
	}
	_, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, op := range ops {
			if op.Value == nil {
				p.Del(ctx, s.ns+op.Key)
			} else {
				p.Set(ctx, s.ns+op.Key, op.Value, op.TTL)
			}
		}
		return nil
	})
	return err
}

// Clear implements store.Store: only this namespace's keys.
func (s *Store) Clear(ctx context.Context) error {
	it := s.c.Scan(ctx, 0, globEscape(s.ns)+"*", 1000).Iterator()
	var batch []string
	for it.Next(ctx) {
		batch = append(batch, it.Val())
		if len(batch) == 1000 {
			if err := s.c.Del(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return s.c.Del(ctx, batch...).Err()
	}
	return nil
}

// Kind implements store.Store.
func (s *Store) Kind() string { return "redis" }

// Close implements store.Store.
func (s *Store) Close() error { return s.c.Close() }
