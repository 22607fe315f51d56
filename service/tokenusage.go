package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/telemetry"
)

// Token usage (issue 27: the console's usage page, the SDK's billing usage events): the
// tokens each tenant trained (forward and forward_backward), prefilled (sample prompts,
// full-rate or served from the prefix cache) and sampled, counted in hourly buckets by
// tenant, base model, session and kind. Counts gather in memory and a flusher writes the
// changed buckets in one store commit shortly after (as run records are flushed); each
// replica writes its own keys (keyUsage + replica + "/" + hour + "/" + a digest of the
// bucket's dimensions), so replicas never race on a bucket, and a read sums them all.
// Buckets older than billing.usage_retention_days are deleted by the flusher and at
// start-up.

// keyUsage + replica ("-" for a single server) + "/" + hour + "/" + digest: one bucket.
const keyUsage = "usage/"

// reasonUsageFlush labels a failed write of usage buckets.
const reasonUsageFlush = "usage_flush"

// The kinds of token usage (the SDK's billing event types; cached prefill is a
// sampling_prefill event with cached true).
const (
	UsageTraining      = "training"
	UsagePrefill       = "sampling_prefill"
	UsagePrefillCached = "sampling_prefill_cached"
	UsageSample        = "sampling_sample"
	// UsageStorage buckets hold the bytes a tenant's runs held on disk when the hour was
	// sampled (the first reaper pass of the hour): byte-hours, the SDK's storage events.
	UsageStorage = "storage"
)

// UsageBucket is the tokens of one kind a tenant used in one hour, on one base model, in
// one session ("" when the usage had none: the OpenAI/Anthropic-compatible routes).
type UsageBucket struct {
	Hour      time.Time `json:"hour"` // the bucket's start, UTC
	Tenant    string    `json:"tenant"`
	BaseModel string    `json:"base_model"`
	SessionID string    `json:"session_id,omitempty"`
	Kind      string    `json:"kind"`
	Tokens    int64     `json:"tokens"`
}

type usageKey struct {
	hour                         int64 // unix hours
	tenant, model, session, kind string
}

func (k usageKey) bucket(tokens int64) UsageBucket {
	return UsageBucket{Hour: time.Unix(k.hour*3600, 0).UTC(), Tenant: k.tenant, BaseModel: k.model, SessionID: k.session, Kind: k.kind, Tokens: tokens}
}

// usageCtl holds this replica's buckets, and writes them to the store (keyUsage, this
// replica's keys) off the operations' path.
type usageCtl struct {
	st          store.Store
	self        string
	now         func() time.Time
	retention   time.Duration // billing.usage_retention_days
	tokens      metric.Int64Counter
	writeFailed func(ctx context.Context, reason string, err error, args ...any)

	mu    sync.Mutex
	m     map[usageKey]int64
	dirty map[usageKey]bool
	kick  chan struct{}
	// storageHour is the last hour whose storage was sampled (sampleStorage).
	storageHour int64
}

func newUsageCtl(st store.Store, self string, now func() time.Time, retentionDays int, tokens metric.Int64Counter,
	writeFailed func(ctx context.Context, reason string, err error, args ...any)) usageCtl {
	config.MustPositive("billing.usage_retention_days", retentionDays)
	return usageCtl{st: st, self: self, now: now, retention: time.Duration(retentionDays) * 24 * time.Hour, tokens: tokens,
		writeFailed: writeFailed, m: map[usageKey]int64{}, dirty: map[usageKey]bool{}, kick: make(chan struct{}, 1)}
}

func usageReplica(self string) string {
	if self == "" {
		return "-"
	}
	return self
}

func usageStoreKey(self string, k usageKey) string {
	d := sha256.Sum256([]byte(k.tenant + "\x00" + k.model + "\x00" + k.session + "\x00" + k.kind))
	return keyUsage + usageReplica(self) + "/" + strconv.FormatInt(k.hour, 10) + "/" + hex.EncodeToString(d[:12])
}

// addUsage counts n tokens of kind for tenant on base in session now.
func (s *Service) addUsage(tenant, base, session, kind string, n int) {
	s.usage.add(tenant, base, session, kind, n)
}

// add counts n tokens of kind for tenant on base in session now.
func (u *usageCtl) add(tenant, base, session, kind string, n int) {
	if n <= 0 || tenant == "" {
		return
	}
	k := usageKey{hour: u.now().Unix() / 3600, tenant: tenant, model: base, session: session, kind: kind}
	u.mu.Lock()
	u.m[k] += int64(n)
	u.dirty[k] = true
	u.mu.Unlock()
	select {
	case u.kick <- struct{}{}:
	default:
	}
	u.tokens.Add(context.Background(), int64(n), telemetry.Attrs(telemetry.MAttrBaseModel, base, telemetry.MAttrKind, kind))
}

// SampleStorageAt runs the reaper's storage sample as if the time were now: for tests
// that cannot wait for an hour to turn.
func (s *Service) SampleStorageAt(now time.Time) { s.sampleStorage(now) }

// sampleStorage records, once an hour, the bytes each tenant's runs on this replica hold
// on disk (the first call in an hour samples it; a restart within the hour samples it
// again and replaces the bucket rather than adding to it).
func (s *Service) sampleStorage(now time.Time) {
	hour := now.Unix() / 3600
	u := &s.usage
	u.mu.Lock()
	due := u.storageHour != hour
	u.storageHour = hour
	u.mu.Unlock()
	if !due {
		return
	}
	tenants := map[string]bool{}
	s.lock(lkRuns)
	for r := range s.runs.all() {
		tenants[r.Tenant] = true
	}
	s.unlock(lkRuns)
	changed := false
	for t := range tenants {
		b := s.DiskUsage(t) // walks directories: outside every lock
		if b <= 0 {
			continue
		}
		k := usageKey{hour: hour, tenant: t, kind: UsageStorage}
		u.mu.Lock()
		u.m[k], u.dirty[k] = b, true
		u.mu.Unlock()
		changed = true
	}
	if changed {
		select {
		case u.kick <- struct{}{}:
		default:
		}
	}
}

// flusher writes the buckets when counts come, and a last time when stop closes.
func (u *usageCtl) flusher(stop <-chan struct{}, done func()) {
	defer done()
	for {
		select {
		case <-stop:
			u.flush(context.Background())
			return
		case <-u.kick:
		}
		time.Sleep(flushDelay) // let more counts join this commit
		u.flush(context.Background())
	}
}

// flush writes the changed buckets and deletes those past the retention, in one
// commit; a failed write leaves them to the next flush.
func (u *usageCtl) flush(ctx context.Context) {
	cutoff := u.now().Add(-u.retention).Unix() / 3600
	var ops []store.Op
	u.mu.Lock()
	written := u.dirty
	u.dirty = map[usageKey]bool{}
	for k, n := range u.m {
		if k.hour < cutoff {
			delete(u.m, k)
			delete(written, k)
			ops = append(ops, store.Op{Key: usageStoreKey(u.self, k)})
			continue
		}
		if written[k] {
			b, err := json.Marshal(k.bucket(n))
			if err != nil {
				continue // strings, ints and a time: cannot fail
			}
			ops = append(ops, store.Op{Key: usageStoreKey(u.self, k), Value: b})
		}
	}
	u.mu.Unlock()
	if len(ops) == 0 {
		return
	}
	if err := u.st.Apply(ctx, ops); err != nil {
		u.writeFailed(ctx, reasonUsageFlush, err, "count", len(ops))
		u.mu.Lock()
		for k := range written {
			if _, ok := u.m[k]; ok {
				u.dirty[k] = true
			}
		}
		u.mu.Unlock()
	}
}

// load reads this replica's buckets and deletes those past the retention.
func (u *usageCtl) load(ctx context.Context, log *slog.Logger) error {
	cutoff := u.now().Add(-u.retention).Unix() / 3600
	var old []string
	err := u.st.Scan(ctx, keyUsage+usageReplica(u.self)+"/", func(key string, v []byte) error {
		var b UsageBucket
		if err := json.Unmarshal(v, &b); err != nil {
			log.Warn("skipping unreadable usage bucket", "key", key, "error", err)
			return nil
		}
		k := usageKey{hour: b.Hour.Unix() / 3600, tenant: b.Tenant, model: b.BaseModel, session: b.SessionID, kind: b.Kind}
		if k.hour < cutoff {
			old = append(old, key)
			return nil
		}
		u.m[k] += b.Tokens
		return nil
	})
	if err != nil {
		return fmt.Errorf("load %s records: %w", keyUsage, err)
	}
	if len(old) > 0 {
		if err := u.st.Del(ctx, old...); err != nil {
			u.writeFailed(ctx, reasonUsageFlush, err, "count", len(old))
		}
	}
	return nil
}

// UsageBuckets returns the buckets of tenant ("" for every tenant) whose hour starts in
// [from, to), oldest first. On a replica the other replicas' buckets are read from the
// store; this replica's come from memory (the newest counts are not flushed yet).
func (s *Service) UsageBuckets(ctx context.Context, tenant string, from, to time.Time) ([]UsageBucket, error) {
	lo, hi := from.Unix(), to.Unix()
	in := func(b UsageBucket) bool {
		h := b.Hour.Unix()
		return (tenant == "" || b.Tenant == tenant) && h >= lo && h < hi
	}
	sums := map[usageKey]int64{}
	add := func(b UsageBucket) {
		if in(b) {
			sums[usageKey{hour: b.Hour.Unix() / 3600, tenant: b.Tenant, model: b.BaseModel, session: b.SessionID, kind: b.Kind}] += b.Tokens
		}
	}
	s.usage.mu.Lock()
	for k, n := range s.usage.m {
		add(k.bucket(n))
	}
	s.usage.mu.Unlock()
	if s.self != "" {
		own := keyUsage + usageReplica(s.self) + "/"
		err := s.st.Scan(ctx, keyUsage, func(key string, v []byte) error {
			var b UsageBucket
			if !strings.HasPrefix(key, own) && json.Unmarshal(v, &b) == nil {
				add(b)
			}
			return nil
		})
		if err != nil {
			return nil, classify(fmt.Errorf("read usage: %w", err))
		}
	}
	out := make([]UsageBucket, 0, len(sums))
	for k, n := range sums {
		out = append(out, k.bucket(n))
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.Hour.Equal(b.Hour) {
			return a.Hour.Before(b.Hour)
		}
		if a.Tokens != b.Tokens {
			return a.Tokens > b.Tokens
		}
		return fmt.Sprint(a.Tenant, a.BaseModel, a.SessionID, a.Kind) < fmt.Sprint(b.Tenant, b.BaseModel, b.SessionID, b.Kind)
	})
	return out, nil
}
