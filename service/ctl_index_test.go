package service

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/tuft-go/tuft/config"
)

// The owner index follows every put, replace and delete: a tenant's records from the
// index are exactly the records of that tenant among all.
func TestOwnerIndexFollowsPutAndDel(t *testing.T) {
	tb := newTable[*Session]()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		id := fmt.Sprintf("s%d", rng.IntN(300))
		switch rng.IntN(3) {
		case 0, 1:
			tb.put(&Session{ID: id, Tenant: fmt.Sprintf("t%d", rng.IntN(7))}) // a replace may change tenant
		case 2:
			tb.del(id)
		}
	}
	for tn := range 8 {
		tenant := fmt.Sprintf("t%d", tn)
		var want, got []string
		for se := range tb.all() {
			if se.Tenant == tenant {
				want = append(want, se.ID)
			}
		}
		for se := range tb.ofTenant(tenant) {
			got = append(got, se.ID)
		}
		sort.Strings(want)
		sort.Strings(got)
		if fmt.Sprint(want) != fmt.Sprint(got) {
			t.Fatalf("tenant %s: index has %v, records have %v", tenant, got, want)
		}
	}
	if len(tb.byTenant["t7"]) != 0 {
		t.Fatal("a tenant with no records keeps an index entry")
	}
}

// Checkpoints: the index counts a tenant's checkpoints per run, through put, overwrite,
// del and replaceRun.
func TestCheckpointOwnerIndex(t *testing.T) {
	c := newCkptCtl(t.TempDir())
	c.put(&Checkpoint{RunID: "r1", Tenant: "a", Type: CkptTraining, Name: "x"})
	c.put(&Checkpoint{RunID: "r1", Tenant: "a", Type: CkptTraining, Name: "x"}) // overwrite
	c.put(&Checkpoint{RunID: "r1", Tenant: "a", Type: CkptSampler, Name: "y"})
	c.put(&Checkpoint{RunID: "r2", Tenant: "b", Type: CkptTraining, Name: "x"})
	if got := c.byTenant["a"]["r1"]; got != 2 {
		t.Fatalf("tenant a, run r1: %d checkpoints indexed, want 2", got)
	}
	c.del("r1", "weights/x")
	c.replaceRun("r2", &Checkpoint{RunID: "r2", Tenant: "c", Type: CkptTraining, Name: "z"})
	count := func(tenant string) (n int) {
		for range c.ofTenant(tenant) {
			n++
		}
		return n
	}
	if count("a") != 1 || count("b") != 0 || count("c") != 1 {
		t.Fatalf("after del and replaceRun: a=%d b=%d c=%d, want 1 0 1", count("a"), count("b"), count("c"))
	}
	if _, ok := c.byTenant["b"]; ok {
		t.Fatal("tenant b has no checkpoints left but keeps an index entry")
	}
}

// listingService is a Service with its controllers alone, holding own records of tenant
// "a" and others records of 10 other tenants. With poison, every other tenant's record is
// replaced by nil after indexing, so a listing that so much as reads one of them panics.
func listingService(t testing.TB, own, others int, poison bool) *Service {
	s := &Service{family: newFamily(config.Config{CheckpointDir: t.TempDir()}, nil)}
	at := time.Unix(1_800_000_000, 0)
	add := func(tenant string, i int) {
		id := fmt.Sprintf("%s-%d", tenant, i)
		s.sessions.put(&Session{ID: "sess-" + id, Tenant: tenant, CreatedAt: at.Add(time.Duration(i) * time.Second)})
		s.runs.put(&Run{ID: "run-" + id, Tenant: tenant, LastRequestTime: at.Add(time.Duration(i) * time.Second)})
		s.ckpts.put(&Checkpoint{RunID: "run-" + id, Tenant: tenant, Type: CkptSampler, Name: "c", CreatedAt: at})
	}
	for i := range own {
		add("a", i)
	}
	for i := range others {
		add(fmt.Sprintf("other%d", i%10), i)
	}
	if poison {
		for tenant, ids := range s.sessions.byTenant {
			if tenant != "a" {
				for id := range ids {
					s.sessions.recs[id], ids[id] = nil, nil
				}
			}
		}
		for tenant, ids := range s.runs.byTenant {
			if tenant != "a" {
				for id := range ids {
					s.runs.recs[id], ids[id] = nil, nil
					s.ckpts.byRun[id]["sampler_weights/c"] = nil
				}
			}
		}
	}
	return s
}

// A listing of one tenant among 10,000 records of others reads the tenant's records
// alone (the others are poisoned: reading one panics), and lists all of them.
func TestListingsTouchOnlyTheTenantsRecords(t *testing.T) {
	ctx := context.Background()
	s := listingService(t, 25, 10_000, true)
	if ids := s.ListSessions(ctx, "a", 0, 0); len(ids) != 25 {
		t.Fatalf("ListSessions: %d ids, want 25", len(ids))
	}
	if runs, total := s.ListRuns(ctx, "a", 10, 0); len(runs) != 10 || total != 25 {
		t.Fatalf("ListRuns: %d runs of %d, want 10 of 25", len(runs), total)
	}
	if cs, total := s.ListAllCheckpoints(ctx, "a", 0, 0); len(cs) != 25 || total != 25 {
		t.Fatalf("ListAllCheckpoints: %d of %d, want 25", len(cs), total)
	}
}

// BenchmarkListSessionsAmongOthers: one tenant's 25 sessions among 10,000 of others.
func BenchmarkListSessionsAmongOthers(b *testing.B) {
	ctx := context.Background()
	s := listingService(b, 25, 10_000, false)
	b.ResetTimer()
	for b.Loop() {
		s.ListSessions(ctx, "a", 20, 0)
	}
}

// BenchmarkListRunsAmongOthers: one tenant's 25 runs among 10,000 of others.
func BenchmarkListRunsAmongOthers(b *testing.B) {
	ctx := context.Background()
	s := listingService(b, 25, 10_000, false)
	b.ResetTimer()
	for b.Loop() {
		s.ListRuns(ctx, "a", 20, 0)
	}
}

// BenchmarkListAllCheckpointsAmongOthers: one tenant's 25 checkpoints among 10,000 of
// others.
func BenchmarkListAllCheckpointsAmongOthers(b *testing.B) {
	ctx := context.Background()
	s := listingService(b, 25, 10_000, false)
	b.ResetTimer()
	for b.Loop() {
		s.ListAllCheckpoints(ctx, "a", 20, 0)
	}
}
