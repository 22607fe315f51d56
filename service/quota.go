package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/tuft-go/tuft/engine"
)

// Per-tenant quotas (issue 12, finding 6): what one tenant may hold at once, so that it
// cannot exhaust the memory or the disk the others need. Each is a key of config.Limits
// and each refusal names it:
//
//   - limits.max_runs_per_tenant, limits.max_adapter_bytes_per_tenant: live training
//     runs (created and not unloaded; for the count, also the copies copy_weights made
//     that still hold their checkpoint) and the memory their adapters take in the
//     executor (weights, gradients and two optimizer moments in float32, from the rank
//     and the model's shape), checked when a run or a copy is created;
//   - limits.max_samplers_per_tenant: open sampling sessions, those opened by
//     save_weights_and_get_sampling_client included (inflight clients too: each is a
//     session, although they share one adapter per run);
//   - limits.max_metadata_bytes (one record: 413) and limits.max_metadata_bytes_per_tenant
//     (what the tenant's sessions, ended ones until pruned (prune.go), live runs and
//     checkpoints hold);
//   - limits.max_disk_bytes_per_tenant: bytes under the tenant's run directories,
//     checked before a checkpoint, an export, a copy or a sampler's weights are written,
//     with the new files' size estimated from the adapter's shape (an upper bound), so a
//     refused save writes nothing.
//
// A quota that only the tenant can free (by unloading a run, closing a client, deleting
// a checkpoint) is a 403: the Tinker SDK retries 408, 409, 429 and 5xx for up to five
// minutes and would only wait in vain. When resources held by sessions whose clients
// stopped heartbeating (a crashed client) cover the excess, the reaper will free them:
// then the answer is 429 with Retry-After at their expiry, and the SDK's retry succeeds.
// Likewise for the metadata quota when ended sessions' metadata, which the reaper prunes
// (prune.go), covers the excess.

// staleHeartbeat is how long a session's client must have been silent to be taken for
// gone (the SDK heartbeats every 10 s): what it holds is freed when it expires.
const staleHeartbeat = 30 * time.Second

// quotaState holds disk space reserved by saves being written, and the known sizes of
// run directories (disk.go).
type quotaState struct {
	mu       sync.Mutex
	reserved map[string]int64 // tenant → bytes
	sizes    map[string]int64 // run → bytes under its directory, while known
	gen      map[string]int64 // run → changes to its directory (a walk began before one is not kept)
}

// held is something a tenant holds, counted against a quota: its amount, and when the
// reaper will release it (zero if its session's client is alive).
type held struct {
	amount  int64
	release time.Time
}

// overQuota is the refusal of a quota exceeded by excess: 429 with Retry-After if what
// silent sessions hold covers the excess, else 403.
func overQuota(limit string, now time.Time, items []held, excess int64, msg string) error {
	var stale []held
	for _, it := range items {
		if !it.release.IsZero() {
			stale = append(stale, it)
		}
	}
	sort.Slice(stale, func(i, j int) bool { return stale[i].release.Before(stale[j].release) })
	var freed int64
	for _, it := range stale {
		freed += it.amount
		if freed >= excess {
			// The reaper runs every 5 s: the release happens at most that late.
			wait := it.release.Sub(now) + 5*time.Second
			if wait < time.Second {
				wait = time.Second
			}
			return &Error{Kind: KindTooMany, RetryAfter: wait, Limit: limit, Msg: fmt.Sprintf("%s; sessions of yours whose clients stopped heartbeating hold enough and expire within %s: retry then",
				msg, wait.Round(time.Second))}
		}
	}
	return &Error{Kind: KindForbidden, Limit: limit, Msg: msg}
}

// releaseAt is when the reaper will release what session id holds if its client seems
// gone; zero while it heartbeats. Callers hold the sessions lock.
func (s *family) releaseAt(id string, now time.Time) time.Time {
	se := s.sessions.at(id)
	if se == nil || se.Finished != nil || se.Expired || now.Sub(se.LastHeartbeat) < staleHeartbeat {
		return time.Time{}
	}
	return se.LastHeartbeat.Add(s.cfg.HeartbeatTimeout())
}

// holdsAdapter reports whether a run counts as live: its adapter exists or is being
// created.
func holdsAdapter(r *Run) bool { return r.State == RunCreating || r.State == RunReady }

// countRuns counts what limits.max_runs_per_tenant bounds for tenant: its live runs and
// the copies it holds (issue 22, finding 7: copies were made outside the quota). A
// copy is released by deleting its checkpoint; only a live run's session can make the
// reaper free it. Callers hold quotaLocks.
func (s *family) countRuns(tenant string, now time.Time) (n int64, items []held) {
	for r := range s.runs.ofTenant(tenant) {
		if r.Tenant != tenant {
			continue
		}
		switch {
		case holdsAdapter(r):
			items = append(items, held{1, s.releaseAt(r.SessionID, now)})
		case s.holdsCopy(r):
			items = append(items, held{1, time.Time{}})
		default:
			continue
		}
		n++
	}
	return n, items
}

const freeRuns = "unload a run you no longer train (unload_model), delete copies you no longer need (the checkpoint copy_weights made), " +
	"or close a client (ServiceClient.close) to release its runs"

// runsOver is the refusal of one more run or copy over limits.max_runs_per_tenant (nil
// within it). Callers hold quotaLocks.
func (s *family) runsOver(tenant string) error {
	now := s.now()
	n, items := s.countRuns(tenant, now)
	if max := int64(s.cfg.Limits.MaxRunsPerTenant); n+1 > max {
		return overQuota("limits.max_runs_per_tenant", now, items, n+1-max, fmt.Sprintf("tenant %s has %d live training runs and copies, the most limits.max_runs_per_tenant (%d) allows: %s",
			tenant, n, max, freeRuns))
	}
	return nil
}

// checkCopyQuota refuses one more copy (copy_weights) over limits.max_runs_per_tenant.
// Callers hold quotaLocks and insert the copy's run before releasing them.
func (s *family) checkCopyQuota(tenant string) error { return s.runsOver(tenant) }

// adapterBytes is the executor memory of an adapter of lora on base: weights, gradients
// and two optimizer moments, float32.
func (s *family) adapterBytes(base string, lora engine.LoraConfig) int64 {
	return 16 * engine.LoraParamCount(s.models[base].Config, lora)
}

// checkRunQuota refuses one more live run of rank lora on base for tenant over
// limits.max_runs_per_tenant (live runs and copies) or limits.max_adapter_bytes_per_tenant.
// Callers hold quotaLocks and insert the run before releasing them, so two creations
// cannot both pass.
func (s *family) checkRunQuota(tenant, base string, lora engine.LoraConfig) error {
	lim := s.cfg.Limits
	now := s.now()
	add := s.adapterBytes(base, lora)
	var bytes int64
	var mem []held
	for r := range s.runs.ofTenant(tenant) {
		if r.Tenant != tenant || !holdsAdapter(r) {
			continue
		}
		b := s.adapterBytes(r.BaseModel, r.Lora.engine())
		bytes += b
		mem = append(mem, held{b, s.releaseAt(r.SessionID, now)})
	}
	const free = "unload a run you no longer train (unload_model), or close a client (ServiceClient.close) to release its runs"
	if err := s.runsOver(tenant); err != nil {
		return err
	}
	if max := lim.MaxAdapterBytesPerTenant; bytes+add > max {
		return overQuota("limits.max_adapter_bytes_per_tenant", now, mem, bytes+add-max, fmt.Sprintf("a rank-%d adapter on %s takes %d bytes (weights, gradients, optimizer moments); tenant %s's live runs take %d of limits.max_adapter_bytes_per_tenant (%d): %s",
			lora.Rank, base, add, tenant, bytes, max, free))
	}
	return nil
}

// checkSessionQuota refuses one more open client session for tenant over
// limits.max_sessions_per_tenant. Callers hold the sessions lock and insert the session
// before releasing it.
func (s *family) checkSessionQuota(tenant string) error {
	max := int64(s.cfg.Limits.MaxSessionsPerTenant)
	now := s.now()
	var n int64
	var items []held
	for se := range s.sessions.ofTenant(tenant) {
		if se.Tenant == tenant && se.Finished == nil && !se.Expired {
			n++
			items = append(items, held{1, s.releaseAt(se.ID, now)})
		}
	}
	if n+1 <= max {
		return nil
	}
	return overQuota("limits.max_sessions_per_tenant", now, items, n+1-max, fmt.Sprintf("tenant %s has %d open sessions, the most limits.max_sessions_per_tenant (%d) allows: "+
		"close clients you no longer use (ServiceClient.close, or a with block)", tenant, n, max))
}

// checkSamplerQuota refuses one more open sampling session for tenant over
// limits.max_samplers_per_tenant; replacing is the id of a session the new one replaces
// (not counted). Callers hold the sessions and samplers locks and insert the sampler
// before releasing them.
func (s *family) checkSamplerQuota(tenant, replacing string) error {
	max := int64(s.cfg.Limits.MaxSamplersPerTenant)
	now := s.now()
	var n int64
	var items []held
	for sm := range s.samplers.ofTenant(tenant) {
		if sm.Tenant == tenant && !sm.Closed && sm.ID != replacing {
			n++
			items = append(items, held{1, s.releaseAt(sm.SessionID, now)})
		}
	}
	if n+1 <= max {
		return nil
	}
	return overQuota("limits.max_samplers_per_tenant", now, items, n+1-max, fmt.Sprintf("tenant %s has %d open sampling sessions, the most limits.max_samplers_per_tenant (%d) allows: "+
		"close a client (ServiceClient.close) whose sampling clients you no longer use, or reuse a sampling_session_seq_id (save_weights_and_get_sampling_client replaces that session)", tenant, n, max))
}

// sessionMetadataBytes is what a session holds from its client: its tags and
// user_metadata as JSON, its names and its finish detail.
func sessionMetadataBytes(se *Session) int64 {
	n := int64(len(se.UserMetadata) + len(se.DisplayName) + len(se.ProjectID) + len(se.SDKVersion))
	for _, t := range se.Tags {
		n += int64(len(t)) + 3 // quotes and comma
	}
	if se.Finished != nil && se.Finished.Detail != nil {
		n += int64(len(*se.Finished.Detail))
	}
	return n
}

// stringMapBytes is a checkpoint's user_metadata's size as JSON (about).
func stringMapBytes(m map[string]string) int64 {
	var n int64
	for k, v := range m {
		n += int64(len(k)+len(v)) + 6
	}
	return n
}

// tenantMetadata is the client metadata tenant holds in memory: its sessions' (ended
// ones too, until pruned: prune.go), its live runs' and its checkpoints', and each
// session's share with when the reaper will prune it (metadataRelease). Callers hold
// quotaLocks.
func (s *family) tenantMetadata(tenant string, now time.Time) (n int64, items []held) {
	for se := range s.sessions.ofTenant(tenant) {
		if b := sessionMetadataBytes(se); se.Tenant == tenant && b > 0 {
			n += b
			items = append(items, held{b, s.metadataRelease(se, now)})
		}
	}
	for r := range s.runs.ofTenant(tenant) {
		if r.Tenant == tenant && holdsAdapter(r) {
			n += int64(len(r.UserMetadata))
		}
	}
	for c := range s.ckpts.ofTenant(tenant) {
		n += stringMapBytes(c.UserMetadata)
	}
	return n, items
}

// metadataRelease is when the reaper will prune session se's metadata: its end plus
// sessions.finished_retention_seconds, for an ended session or one whose client stopped
// heartbeating; zero while its client is alive.
func (s *family) metadataRelease(se *Session, now time.Time) time.Time {
	ended, ok := s.endedAt(se)
	if !ok {
		if now.Sub(se.LastHeartbeat) < staleHeartbeat {
			return time.Time{}
		}
		ended = se.LastHeartbeat.Add(s.cfg.HeartbeatTimeout())
	}
	return ended.Add(s.cfg.FinishedRetention())
}

// checkMetadata refuses a record's metadata of size bytes (what names the record) over
// limits.max_metadata_bytes (413), or over what limits.max_metadata_bytes_per_tenant
// leaves to tenant (403); replaced is what an overwritten record held. Callers hold
// quotaLocks.
func (s *family) checkMetadata(tenant, what string, size, replaced int64) error {
	lim := s.cfg.Limits
	if size > int64(lim.MaxMetadataBytes) {
		return &Error{Kind: KindTooLarge, Limit: "limits.max_metadata_bytes", Msg: fmt.Sprintf("%s carries %d bytes of metadata (tags and user_metadata as JSON), more than limits.max_metadata_bytes (%d)",
			what, size, lim.MaxMetadataBytes)}
	}
	if size == 0 {
		return nil
	}
	now := s.now()
	held, items := s.tenantMetadata(tenant, now)
	if total := held - replaced; total+size > lim.MaxMetadataBytesPerTenant {
		return overQuota("limits.max_metadata_bytes_per_tenant", now, items, total+size-lim.MaxMetadataBytesPerTenant, fmt.Sprintf(
			"%s carries %d bytes of metadata; tenant %s's sessions, live runs and checkpoints hold %d of limits.max_metadata_bytes_per_tenant (%d), "+
				"a finished or expired session's until sessions.finished_retention_seconds (%s) after it ended: "+
				"unload runs or delete checkpoints, or wait for ended sessions to be pruned", what, size, tenant, total, lim.MaxMetadataBytesPerTenant, s.cfg.FinishedRetention()))
	}
	return nil
}

// saveBytes is an upper bound of what a save of run r writes: the adapter in float32,
// with two optimizer moments for a training checkpoint, room for each tensor's entry in
// the safetensors headers, and for the small files (config, optimizer state).
func (s *family) saveBytes(r *Run, optimizer bool) int64 {
	c := s.models[r.BaseModel].Config
	copies := int64(1)
	if optimizer {
		copies = 3
	}
	tensors := int64(c.Layers*int(engine.NumLayerProj)*2 + 2)
	return copies*(4*engine.LoraParamCount(c, r.Lora.engine())+256*tensors) + 64<<10
}

// removeEphemeral deletes a released sampler's own weights (those of
// save_weights_and_get_sampling_client; an inflight client's are its run's).
func (s *Service) removeEphemeral(sm *Sampler) {
	if !sm.Ephemeral || sm.Inflight || sm.AdapterDir == "" || sm.RunID == "" {
		return
	}
	if filepath.Dir(sm.AdapterDir) != s.ckpts.layout().ephemeralParent(sm.RunID) {
		return // never delete outside the run's own sampler weights
	}
	defer s.diskChanged(sm.RunID)
	if err := os.RemoveAll(sm.AdapterDir); err != nil {
		s.log.Warn("could not delete a released sampler's weights", "sampler", sm.ID, "dir", sm.AdapterDir, "error", err)
	}
}

// sweepEphemeral deletes, at start, the sampler weights under this server's runs that no
// open sampling session uses: those of samplers released while the files could not be
// removed, or by a version that never removed them.
func (s *Service) sweepEphemeral() {
	keep := map[string]bool{}
	for sm := range s.samplers.all() {
		if !sm.Closed && sm.Ephemeral && sm.AdapterDir != "" {
			keep[sm.AdapterDir] = true
		}
	}
	removed := 0
	for r := range s.runs.all() {
		id := r.ID
		parent := s.ckpts.layout().ephemeralParent(id)
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if d := filepath.Join(parent, e.Name()); !keep[d] {
				if err := os.RemoveAll(d); err != nil {
					s.log.Warn("could not delete unused sampler weights", "dir", d, "error", err)
					continue
				}
				removed++
			}
		}
	}
	if removed > 0 {
		s.log.Info("deleted the weights of sampling sessions that no longer exist", "count", removed)
	}
}

// quotaLocks are the controller locks the metadata and run quota checks read under.
const quotaLocks = lkSessions | lkRuns | lkCkpts

// checkNewRun is checkRunQuota with the new run's metadata. Callers hold quotaLocks.
func (s *family) checkNewRun(tenant, base string, lora engine.LoraConfig, md Metadata) error {
	if err := s.checkMetadata(tenant, "the training run's user_metadata", int64(len(md)), 0); err != nil {
		return err
	}
	return s.checkRunQuota(tenant, base, lora)
}

// checkSaveQuota refuses, when it is submitted, a save over the sampler quota (the
// ephemeral form opens a sampling session) or the metadata quotas. Callers hold
// quotaLocks and the samplers lock.
func (s *family) checkSaveQuota(r *Run, in SaveInput, typ string, ephemeral bool) error {
	if ephemeral {
		replacing := SamplerID(r.SessionID, *in.SamplerSeq)
		if len(s.ephemeralSamplers(r, replacing)) > 0 {
			return nil // the run's oldest will make room (makeRoomForEphemeral)
		}
		return s.checkSamplerQuota(r.Tenant, replacing)
	}
	var replaced int64
	if old, ok := s.ckpts.get(r.ID, ckptKindDir(typ)+"/"+in.Name); ok {
		replaced = stringMapBytes(old.UserMetadata)
	}
	return s.checkMetadata(r.Tenant, "the checkpoint's user_metadata", stringMapBytes(in.UserMetadata), replaced)
}

// makeRoomForEphemeral releases run r's oldest sampling sessions made by
// save_weights_and_get_sampling_client so that one more (replacing the session
// replacing, if open) leaves the run at most limits.max_ephemeral_samplers_per_run of
// them and the tenant within limits.max_samplers_per_tenant. The SDK never releases
// them (an RL loop makes one per iteration and samples the newest), so without this a
// long loop would hit the tenant's quota. A released session's requests fail with a
// message that says why; its weights are deleted. The quota is then checked as usual
// (403 if the tenant's other sessions fill it).
func (s *Service) makeRoomForEphemeral(ctx context.Context, r *Run, replacing string) error {
	lim := s.cfg.Limits
	s.lock(lkSamplers)
	mine := s.ephemeralSamplers(r, replacing)
	open := 0
	for sm := range s.samplers.ofTenant(r.Tenant) {
		if sm.Tenant == r.Tenant && !sm.Closed && sm.ID != replacing {
			open++
		}
	}
	n := len(mine) + 1 - lim.MaxEphemeralSamplersPerRun
	if over := open + 1 - lim.MaxSamplersPerTenant; over > n {
		n = over
	}
	n = min(max(n, 0), len(mine))
	victims := mine[:n]
	why := fmt.Sprintf("released: training run %s made newer sampling clients with save_weights_and_get_sampling_client, and only the newest "+
		"limits.max_ephemeral_samplers_per_run (%d) stay open (fewer when the tenant is at limits.max_samplers_per_tenant, %d)",
		r.ID, lim.MaxEphemeralSamplersPerRun, lim.MaxSamplersPerTenant)
	for _, sm := range victims {
		sm.ClosedWhy = why
	}
	s.unlock(lkSamplers)
	for _, sm := range victims {
		s.fut.DropQueue(sm.ID, fmt.Sprintf("sampling session %s was %s", sm.ID, why))
		s.closeSampler(ctx, sm)
	}
	s.lock(lkSessions | lkSamplers)
	defer s.unlock(lkSessions | lkSamplers)
	return s.checkSamplerQuota(r.Tenant, replacing)
}
