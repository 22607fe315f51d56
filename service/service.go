package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/telemetry"
)

// Service is the control plane's state and operations: the controllers (their family)
// and one field per feature area, each a type with its state and behaviour; its own
// methods are the API the HTTP layer calls and the operations that need the whole service.
type Service struct {
	// The controllers, one per kind of record, their lock order, the configuration, the
	// clock and the models (family.go): cfg, now and models are read as s.cfg, s.now,
	// s.models.
	family
	st   store.Store
	fut  *futures.Manager
	be   *backend.Backend
	log  *slog.Logger
	tel  telemetry.Settings
	enc  ResultEncoder               // the operations' results → futures' bytes (Options.Encoder)
	keys map[config.KeyDigest]string // the API keys' digests → tenant
	// operator is auth.operator_key_sha256's digest (nil: no operator).
	operator *config.KeyDigest
	self     string // this API replica ("" for a single server)

	stop    chan struct{}
	stopped sync.WaitGroup

	// The feature areas.
	tokens   signer          // signs archive URLs, file tokens and trace links (tokens.go)
	replicas replicaSet      // the other replicas: ownership, addresses, their records (replicas.go)
	metrics  metricCtl       // the runs' metric histories (metrics.go)
	usage    usageCtl        // token usage in hourly buckets (tokenusage.go)
	adapters *adapterCache   // the inference LRU: checkpoints the compatible routes sample from (adapterlru.go)
	polls    *completionLogs // the sampling sessions' completion logs (retrieve_futures, futurespoll.go)
	quota    quotaState      // disk space reserved by saves being written (quota.go, disk.go)
	exports  exportSlots     // each tenant's exports running (ckptexport.go)
	spans    spanLog         // the per-session span record (sessionspans.go)
	audits   auditLog        // the tenants' audit entries (audit.go)

	dirtyMu sync.Mutex
	dirty   map[string]*Run // run records to write, coalesced by the flusher
	kick    chan struct{}
}

// Options wires a Service.
type Options struct {
	Config  config.Config
	Store   store.Store
	Futures *futures.Manager
	Backend *backend.Backend
	Logger  *slog.Logger
	Now     func() time.Time
	// TracerProvider and Instruments receive the controllers' spans and metrics
	// (default: the OTel global provider and telemetry.Metrics()).
	TracerProvider trace.TracerProvider
	Instruments    *telemetry.Instruments
	// Encoder turns the operations' results into the futures' bytes (the HTTP layer's
	// wire types); required.
	Encoder ResultEncoder
}

// New builds the service, checks the store's model signature, restores every record and
// every run's adapter, and resolves futures left in flight by a previous process.
func New(ctx context.Context, o Options) (*Service, error) {
	if o.Encoder == nil {
		return nil, errors.New("service: Options.Encoder is required (the HTTP layer's result encoder)")
	}
	s := &Service{enc: o.Encoder,
		family: newFamily(o.Config, o.Now), st: o.Store, fut: o.Futures, be: o.Backend, log: o.Logger,
		keys: map[config.KeyDigest]string{}, stop: make(chan struct{}),
		dirty: map[string]*Run{}, kick: make(chan struct{}, 1), self: o.Config.Server.ReplicaID,
		tel:     telemetry.NewSettings(telemetry.WithTracerProvider(o.TracerProvider), telemetry.WithInstruments(o.Instruments)),
		metrics: newMetricCtl(o.Config.Limits.MaxMetricPointsPerRun),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.adapters = newAdapterCache(o.Backend, s.log, o.Config.Inference.MaxAdapters)
	// The feature areas, each a type with its state (Service's fields).
	s.polls = newCompletionLogs(o.Config.Limits.MaxCompletionEventsPerSampler, o.Config.FutureTTL(), o.Futures, s.log, s.now)
	s.tokens.now = s.now
	s.usage = newUsageCtl(s.st, s.self, s.now, o.Config.Billing.UsageRetentionDays, s.tel.Instruments.UsageTokens, s.writeFailed)
	s.spans = newSpanLog(s.st, s.log, s.now, s.tel.Instruments.SessionSpansDropped, o.Config.Limits, s.spanOwners, s.writeFailed)
	s.audits = newAuditLog(s.st, s.log, s.now, o.Config.Limits, s.tel.Instruments.AuditEvents, s.writeFailed)
	s.replicas = replicaSet{st: s.st, self: s.self, now: s.now, log: s.log}
	for _, m := range s.be.Models() {
		s.models[m.Name] = m
	}
	for _, k := range o.Config.Auth.APIKeys {
		h, err := config.ParseKeyDigest(k.KeySHA256)
		if err != nil {
			return nil, fmt.Errorf("auth.api_keys: tenant %s: %w", k.Tenant, err)
		}
		s.keys[h] = k.Tenant
	}
	if k := o.Config.Auth.OperatorKeySHA256; k != "" {
		h, err := config.ParseKeyDigest(k)
		if err != nil {
			return nil, fmt.Errorf("auth.operator_key_sha256: %w", err)
		}
		s.operator = &h
	}
	if err := os.MkdirAll(o.Config.CheckpointDir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint_dir: %w", err)
	}
	if err := s.checkSignature(ctx); err != nil {
		return nil, err
	}
	if err := s.tokens.load(ctx, s.st); err != nil {
		return nil, err
	}
	if err := s.restore(ctx); err != nil {
		return nil, err
	}
	if err := s.spans.restore(ctx); err != nil {
		return nil, err
	}
	if err := s.usage.load(ctx, s.log); err != nil {
		return nil, err
	}
	s.stopped.Add(4)
	go s.reaper()
	go s.flusher()
	go s.spans.recorder(s.stop, s.stopped.Done)
	go s.usage.flusher(s.stop, s.stopped.Done)
	return s, nil
}

// Close stops background work. It does not close the store or the futures manager.
func (s *Service) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.stopped.Wait()
	s.polls.close()
}

// Authenticate maps an API key to its tenant.
func (s *Service) Authenticate(key string) (string, bool) {
	if key == "" {
		return "", false
	}
	h := config.HashAPIKey(key)
	// Compare against every digest in constant time: the time taken says nothing of how
	// much of a key matched.
	for k, t := range s.keys {
		if k.Equal(h) {
			return t, true
		}
	}
	return "", false
}

// IsOperator reports whether key is the operator key (auth.operator_key_sha256), which
// reads the operator's routes only (GET /api/v1/admin/overview).
func (s *Service) IsOperator(key string) bool {
	return key != "" && s.operator != nil && s.operator.Equal(config.HashAPIKey(key))
}

// Models lists the served base models, each with the context length requests on it may
// use (what the service enforces: see maxContext).
func (s *Service) Models() []backend.ModelInfo {
	out := make([]backend.ModelInfo, 0, len(s.models))
	for _, m := range s.models {
		m.MaxContextLength = s.maxContext(m.Name, m)
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// signature is what the store remembers of the model configuration it was written under.
type signature struct {
	Models map[string]string `json:"models"` // name → weights/architecture signature
}

// checkSignature refuses a store written under an incompatible model configuration: a
// run trained on one model must never be resumed on different weights.
func (s *Service) checkSignature(ctx context.Context) error {
	cur := signature{Models: map[string]string{}}
	for n, m := range s.models {
		cur.Models[n] = m.Signature
	}
	b, err := s.st.Get(ctx, keySignature)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return fmt.Errorf("read store signature: %w", err)
	default:
		var old signature
		if err := json.Unmarshal(b, &old); err != nil {
			return fmt.Errorf("store signature is corrupt: %w", err)
		}
		var diffs []string
		for n, sig := range old.Models {
			if c, ok := cur.Models[n]; ok && c != sig {
				diffs = append(diffs, fmt.Sprintf("model %q has different weights or architecture than when the store was written", n))
			}
		}
		if len(diffs) > 0 {
			sort.Strings(diffs)
			return fmt.Errorf("the store (%s) was written under an incompatible model configuration: %s; "+
				"restore the original model files, or run `tuft clear persistence` to start afresh",
				s.st.Kind(), strings.Join(diffs, "; "))
		}
		// Keep signatures of models no longer configured: their runs are kept (as
		// corrupted) and must match if the model comes back.
		for n, sig := range old.Models {
			if _, ok := cur.Models[n]; !ok {
				cur.Models[n] = sig
			}
		}
	}
	return putJSON(ctx, s.st, keySignature, cur)
}
