package service

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/tuft-go/tuft/store"
)

// Several API replicas may share one Redis (server.replica_id). Each session, with the
// runs, sampling sessions and futures created in it, belongs to the replica that created
// it: that replica holds its ordered queues and long-polls in memory. Another replica
// that receives a request about it answers with an ElsewhereError, and the API layer
// forwards the request to the owner, found through the registrations below.

// ElsewhereError says that another replica owns the object a request is about.
type ElsewhereError struct {
	Owner string // the owning replica's id
	What  string // "training run …", for messages
}

func (e *ElsewhereError) Error() string {
	return fmt.Sprintf("%s belongs to API replica %s", e.What, e.Owner)
}

// replicaRecord is a replica's registration.
type replicaRecord struct {
	ID      string    `json:"id"`
	URL     string    `json:"url"`
	Started time.Time `json:"started"`
}

// replicaSet is this replica's view of the others: who owns a record, where a replica
// answers, and the other replicas' records a listing shows.
type replicaSet struct {
	st   store.Store
	self string // this API replica ("" for a single server)
	now  func() time.Time
	log  *slog.Logger
}

// replicaTTL is how long a registration outlives its last renewal.
const replicaTTL = 15 * time.Second

// elsewhere reports an ElsewhereError when key's record exists in the store, belongs to
// tenant and is owned by another replica; nil otherwise (also for a single server).
// It reads the store: callers hold no controller lock (see settle).
func (s *replicaSet) elsewhere(key, tenant string) error {
	if s.self == "" {
		return nil
	}
	b, err := s.st.Get(context.Background(), key)
	if err != nil {
		return nil
	}
	var rec struct {
		Tenant string `json:"tenant"`
		Owner  string `json:"owner"`
	}
	if json.Unmarshal(b, &rec) != nil || rec.Tenant != tenant || rec.Owner == "" || rec.Owner == s.self {
		return nil // another tenant's answers exactly like a missing one
	}
	return &ElsewhereError{Owner: rec.Owner, What: key}
}

// ReplicaID is this replica's id ("" for a single server).
func (s *Service) ReplicaID() string { return s.self }

// ReplicaURL returns the base URL of a live replica.
func (s *Service) ReplicaURL(ctx context.Context, id string) (string, bool) {
	return s.replicas.url(ctx, id)
}

// RegisterReplica publishes this replica's URL until ctx ends (a no-op for a single
// server), renewing it well within replicaTTL.
func (s *Service) RegisterReplica(ctx context.Context, url string) { s.replicas.register(ctx, url) }

// url returns the base URL of a live replica.
func (s *replicaSet) url(ctx context.Context, id string) (string, bool) {
	b, err := s.st.Get(ctx, keyReplica+id)
	if err != nil {
		return "", false
	}
	var r replicaRecord
	if json.Unmarshal(b, &r) != nil || r.URL == "" {
		return "", false
	}
	return r.URL, true
}

// register publishes this replica's URL until ctx ends (a no-op for a single server).
func (s *replicaSet) register(ctx context.Context, url string) {
	if s.self == "" {
		return
	}
	rec, _ := json.Marshal(replicaRecord{ID: s.self, URL: url, Started: s.now().UTC()})
	store.KeepAlive(ctx, s.st, keyReplica+s.self, rec, replicaTTL/3, func(err error) {
		s.log.Warn("replica registration failed; retrying", "error", err)
	})
}

// owned is implemented by the records replicas own.
type owned interface {
	*Session | *Run | *Sampler
}

// foreignRecords calls fn for the tenant's records under prefix that other replicas own
// (listings must show every replica's records). A no-op for a single server.
func foreignRecords[T owned](ctx context.Context, s *replicaSet, prefix, tenant string, fn func(T)) {
	if s.self == "" {
		return
	}
	err := s.st.Scan(ctx, prefix, func(_ string, v []byte) error {
		var head struct {
			Tenant string `json:"tenant"`
			Owner  string `json:"owner"`
		}
		if json.Unmarshal(v, &head) != nil || head.Tenant != tenant || head.Owner == "" || head.Owner == s.self {
			return nil
		}
		rec := new(T)
		if json.Unmarshal(v, rec) == nil && *rec != nil {
			fn(*rec)
		}
		return nil
	})
	if err != nil { // the listing shows this replica's records at least
		s.log.Warn("could not list other replicas' records", "prefix", prefix, "error", err)
	}
}
