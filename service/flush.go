package service

import (
	"context"
	"encoding/json"
	"time"

	"github.com/tuft-go/tuft/store"
)

// The lazy writes of run records: per-operation bookkeeping gathered into one store commit.

// markDirty queues a run record for writing; the flusher coalesces many updates into one
// store commit. Losing the last few updates in a crash is harmless: NextSeq is rebuilt
// from the persisted futures, and the rest is bookkeeping.
//
// The record written is the run as it is at the flush, not as it was when marked: a
// synchronous write in between (unload_model's, say) must not be overwritten by an older
// copy, which a restart would then read (an unloaded run loaded again).
func (s *Service) markDirty(r *Run) {
	s.dirtyMu.Lock()
	s.dirty[r.ID] = r
	s.dirtyMu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// flushDelay is how long the flusher lets run-record updates gather before one commit.
// Per-operation bookkeeping (last request time, next seq_id) is all that waits here.
const flushDelay = 20 * time.Millisecond

func (s *Service) flusher() {
	defer s.stopped.Done()
	for {
		select {
		case <-s.stop:
			s.flush(context.Background())
			return
		case <-s.kick:
		}
		time.Sleep(flushDelay) // let more updates join this commit
		s.flush(context.Background())
	}
}

func (s *Service) flush(ctx context.Context) {
	s.dirtyMu.Lock()
	batch := s.dirty
	s.dirty = map[string]*Run{}
	s.dirtyMu.Unlock()
	if len(batch) == 0 {
		return
	}
	recs := make(map[string]Run, len(batch))
	s.lock(lkRuns)
	for id, r := range batch {
		if s.runs.at(id) == r { // not taken out meanwhile (a creation undone)
			recs[id] = *r
		}
	}
	s.unlock(lkRuns)
	ops := make([]store.Op, 0, len(batch))
	for id, r := range recs {
		b, err := json.Marshal(&r)
		if err != nil {
			s.log.Error("encode run record", "run", id, "error", err)
			continue
		}
		ops = append(ops, store.Op{Key: keyRun + id, Value: b})
	}
	if err := s.st.Apply(ctx, ops); err != nil {
		s.writeFailed(ctx, reasonRunFlush, err, "count", len(ops))
	}
}
