package service

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/telemetry"
)

// A training run's metric history (issue 27, the console's loss charts): one point per
// forward_backward and optim_step that succeeded, holding the metrics its result carried
// (optim_step's with its hyper-parameters), numbered from 1 in the order they ran. It is
// bounded by limits.max_metric_points_per_run: the oldest points go first, and the
// history says how many went. Each point is one store key, keyMetric+run+"/"+slot with
// slot = (seq-1) mod the bound, so a new point overwrites the one it drops and a run
// never holds more keys than the bound; the writes are queued (store.SetQueued), off the
// operation's path. The history of this replica's runs is held in memory, restored at
// start-up, and deleted with the run record.

// keyMetric + run id + "/" + slot: one point of a run's metric history.
const keyMetric = "metric/"

// reasonMetricPoint labels a failed write of a metric point.
const reasonMetricPoint = "metric_point"

// MetricPoint is one operation's metrics.
type MetricPoint struct {
	Seq  int64 `json:"seq"`
	Step int64 `json:"step"` // optimizer steps the run had completed when the operation ran
	// Op is telemetry.OpForwardBackward or telemetry.OpOptimStep.
	Op      string             `json:"op"`
	Time    time.Time          `json:"time"`
	Metrics map[string]float64 `json:"metrics"`
	// NonFinite names the metrics whose value was NaN or infinite (JSON holds no such
	// number, so they are listed here instead of in Metrics).
	NonFinite []string `json:"non_finite,omitempty"`
	// SeqID is the operation's seq_id in its run: an operation run again after a restart
	// (its point already stored) adds no second point.
	SeqID int64 `json:"seq_id"`
}

// MetricPage is one read of a run's history.
type MetricPage struct {
	RunID  string
	Points []MetricPoint
	// NextAfter is the seq to read after next time: the last point's, or the after
	// asked when none came.
	NextAfter int64
	// Dropped counts the oldest points the bound dropped.
	Dropped int64
	// Ended: the run is unloaded or corrupted, so no point will follow.
	Ended bool
	// Changed is closed at the next change of the history (a point, the end).
	Changed <-chan struct{}
}

// metricHist is one run's history (guarded by metricCtl.mu).
type metricHist struct {
	points  []MetricPoint // oldest first, contiguous seqs
	next    int64         // the seq of the next point
	ended   bool
	changed chan struct{} // closed and replaced at each change
	// cold: the run had ended before this process started; its points stay in the store
	// and each read takes them from there (storedHistory), so the memory held is bounded
	// by the runs live since the start, not by every run ever made.
	cold bool
}

func newMetricHist() *metricHist { return &metricHist{next: 1, changed: make(chan struct{})} }

func (h *metricHist) broadcast() {
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *metricHist) dropped() int64 {
	if len(h.points) == 0 {
		return h.next - 1
	}
	return h.points[0].Seq - 1
}

// metricCtl holds the metric histories of this replica's runs.
type metricCtl struct {
	mu  sync.Mutex
	m   map[string]*metricHist
	max int // limits.max_metric_points_per_run
}

// newMetricCtl holds at most max points per run (limits.max_metric_points_per_run,
// validated by config; a zero here is a wiring bug).
func newMetricCtl(max int) metricCtl {
	config.MustPositive("limits.max_metric_points_per_run", max)
	return metricCtl{m: map[string]*metricHist{}, max: max}
}

func metricKey(runID string, seq int64, max int) string {
	return keyMetric + runID + "/" + strconv.FormatInt((seq-1)%int64(max), 10)
}

// hist returns run's history, made empty when it has none (callers hold mu).
func (c *metricCtl) hist(runID string) *metricHist {
	h := c.m[runID]
	if h == nil {
		h = newMetricHist()
		c.m[runID] = h
	}
	return h
}

// optimPoint is what an optim_step's point holds: the metrics it returned, and its
// hyper-parameters as numbers.
func optimPoint(metrics map[string]float64, p engine.StepParams) map[string]float64 {
	out := make(map[string]float64, len(metrics)+6)
	if p.Dimuon != nil {
		d := p.Dimuon
		out["learning_rate"], out["beta1"], out["grad_clip_norm"] = d.LearningRate, d.Beta1, d.GradClipNorm
		out["damping"], out["rank_lr_correction_exponent"] = d.Damping, d.RankLRCorrectionExponent
	} else {
		a := p.Adam
		out["learning_rate"], out["beta1"], out["beta2"] = a.LearningRate, a.Beta1, a.Beta2
		out["eps"], out["weight_decay"], out["grad_clip_norm"] = a.Eps, a.WeightDecay, a.GradClipNorm
	}
	for k, v := range metrics { // what the step measured wins over a parameter's name
		out[k] = v
	}
	return out
}

// recordMetrics appends an operation's point to r's history, counts an optim_step in the
// run's steps and keeps its last loss (the run record, flushed with the operation).
func (s *Service) recordMetrics(ctx context.Context, r *Run, op string, seqID int64, metrics map[string]float64) {
	p := MetricPoint{Op: op, Time: s.now().UTC(), SeqID: seqID, Metrics: make(map[string]float64, len(metrics))}
	for k, v := range metrics {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			p.NonFinite = append(p.NonFinite, k)
			continue
		}
		p.Metrics[k] = v
	}
	sort.Strings(p.NonFinite)
	s.lock(lkRuns)
	p.Step = r.Steps
	if op == telemetry.OpOptimStep {
		r.Steps++
	} else if l, ok := p.Metrics["loss:sum"]; ok {
		r.LastLoss = &l
	} else if slices.Contains(p.NonFinite, "loss:sum") {
		r.LastLoss = nil // the loss diverged: the console shows none rather than a stale one
	}
	s.unlock(lkRuns)

	c := &s.metrics
	c.mu.Lock()
	h := c.hist(r.ID)
	if n := len(h.points); n > 0 && h.points[n-1].SeqID == seqID && h.points[n-1].Op == op {
		c.mu.Unlock() // already recorded before a restart
		return
	}
	p.Seq = h.next
	h.next++
	h.points = append(h.points, p)
	if len(h.points) > c.max {
		// Resliced, not copied: append moves the live points to a new array when the
		// old one is full, and the dropped ones go with the old array.
		h.points = h.points[len(h.points)-c.max:]
	}
	h.broadcast()
	key := metricKey(r.ID, p.Seq, c.max)
	c.mu.Unlock()
	b, err := json.Marshal(&p)
	if err != nil { // finite floats, strings and a time: cannot fail
		s.writeFailed(ctx, reasonMetricPoint, err, "key", key)
		return
	}
	store.SetQueued(context.WithoutCancel(ctx), s.st, key, b, 0, func(err error) {
		if err != nil {
			s.writeFailed(ctx, reasonMetricPoint, err, "key", key)
		}
	})
}

// RunMetrics reads the tenant's run's points after seq after, at most limit of them.
func (s *Service) RunMetrics(tenant, runID string, after int64, limit int) (MetricPage, error) {
	if after < 0 {
		return MetricPage{}, invalidf("after %d must not be negative", after)
	}
	if limit < 1 {
		return MetricPage{}, invalidf("limit %d must be at least 1", limit)
	}
	s.lock(lkRuns)
	r, err := s.runs.owned(tenant, runID)
	ended := err == nil && (r.State == RunUnloaded || r.State == RunCorrupted)
	s.unlock(lkRuns)
	if err != nil {
		return MetricPage{}, s.settle(err)
	}
	c := &s.metrics
	c.mu.Lock()
	h := c.hist(runID)
	points, dropped, cold := h.points, h.dropped(), h.cold
	pg := MetricPage{RunID: runID, NextAfter: after, Ended: ended || h.ended, Changed: h.changed}
	c.mu.Unlock()
	if cold {
		if points, dropped, err = storedHistory(context.Background(), s.st, runID, c.max); err != nil {
			return MetricPage{}, classify(err)
		}
	}
	pg.Dropped = dropped
	i := sort.Search(len(points), func(i int) bool { return points[i].Seq > after })
	for ; i < len(points) && len(pg.Points) < limit; i++ {
		pg.Points = append(pg.Points, points[i])
	}
	if n := len(pg.Points); n > 0 {
		pg.NextAfter = pg.Points[n-1].Seq
	}
	return pg, nil
}

// storedHistory reads a run's points from the store, oldest first, the newest max of
// them, and how many older ones were dropped.
func storedHistory(ctx context.Context, st store.Store, runID string, max int) (points []MetricPoint, dropped int64, err error) {
	err = st.Scan(ctx, keyMetric+runID+"/", func(key string, v []byte) error {
		var p MetricPoint
		if json.Unmarshal(v, &p) == nil && p.Seq >= 1 {
			points = append(points, p)
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read the metric history of %s: %w", runID, err)
	}
	sort.Slice(points, func(i, j int) bool { return points[i].Seq < points[j].Seq })
	if len(points) > max {
		points = points[len(points)-max:]
	}
	if len(points) > 0 {
		dropped = points[0].Seq - 1
	}
	return points, dropped, nil
}

// endMetrics marks r's history finished (the run was unloaded or is corrupted): streams
// end once they have sent every point.
func (s *Service) endMetrics(runID string) {
	c := &s.metrics
	c.mu.Lock()
	h := c.hist(runID)
	if !h.ended {
		h.ended = true
		h.broadcast()
	}
	c.mu.Unlock()
}

// dropMetrics deletes a run's history with its record.
func (s *Service) dropMetrics(ctx context.Context, runID string) {
	c := &s.metrics
	c.mu.Lock()
	h := c.m[runID]
	delete(c.m, runID)
	if h != nil {
		h.ended = true
		h.broadcast()
	}
	c.mu.Unlock()
	var keys []string
	err := s.st.Scan(ctx, keyMetric+runID+"/", func(k string, _ []byte) error {
		keys = append(keys, k)
		return nil
	})
	if err == nil && len(keys) > 0 {
		err = s.st.Del(ctx, keys...)
	}
	if err != nil {
		s.writeFailed(ctx, reasonMetricPoint, err, "run", runID)
	}
}

// load reads the histories of this replica's live runs (runs holds them, loaded
// before); those of ended runs stay in the store (cold). A history stored under another
// bound (the key changed between starts) is rewritten under the current one, keeping
// its newest points.
func (c *metricCtl) load(ctx context.Context, st store.Store, runs iter.Seq[*Run], log *slog.Logger) error {
	for r := range runs {
		runID := r.ID
		if r.State == RunUnloaded || r.State == RunCorrupted {
			h := newMetricHist()
			h.ended, h.cold = true, true
			c.m[runID] = h
			continue
		}
		var keys []string
		var ps []MetricPoint
		err := st.Scan(ctx, keyMetric+runID+"/", func(key string, v []byte) error {
			var p MetricPoint
			if err := json.Unmarshal(v, &p); err != nil || p.Seq < 1 {
				log.Warn("skipping unreadable metric point", "key", key, "error", err)
				return nil
			}
			keys, ps = append(keys, key), append(ps, p)
			return nil
		})
		if err != nil {
			return fmt.Errorf("load %s records of %s: %w", keyMetric, runID, err)
		}
		if len(ps) == 0 {
			continue
		}
		misplaced := len(ps) > c.max
		for i, p := range ps {
			misplaced = misplaced || keys[i] != metricKey(runID, p.Seq, c.max)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].Seq < ps[j].Seq })
		if len(ps) > c.max {
			ps = ps[len(ps)-c.max:]
		}
		if misplaced {
			ops := make([]store.Op, 0, len(keys)+len(ps))
			for _, k := range keys {
				ops = append(ops, store.Op{Key: k})
			}
			for i := range ps {
				b, err := json.Marshal(&ps[i])
				if err != nil {
					return fmt.Errorf("rewrite metric history of %s: %w", runID, err)
				}
				ops = append(ops, store.Op{Key: metricKey(runID, ps[i].Seq, c.max), Value: b})
			}
			if err := st.Apply(ctx, ops); err != nil {
				return fmt.Errorf("rewrite metric history of %s: %w", runID, err)
			}
		}
		h := newMetricHist()
		h.points, h.next = ps, ps[len(ps)-1].Seq+1
		c.m[runID] = h
		// The run record is flushed lazily: the history may know of later steps.
		last := ps[len(ps)-1]
		steps := last.Step
		if last.Op == telemetry.OpOptimStep {
			steps++
		}
		if steps > r.Steps {
			r.Steps = steps
		}
	}
	return nil
}
