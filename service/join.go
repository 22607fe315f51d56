package service

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"github.com/tuft-go/tuft/telemetry"
)

// JoinSamplingSession gives a cloned SamplingClient of tenant's sampling session its
// counter (join_sampling_session, SDK >= 0.32): 1, 2, … in order of joining (the
// original client is 0). The clone numbers its requests counter × 10^9 + n, so clones
// never collide on seq_ids. The counter is kept in the sampler's record: it survives
// a restart, and no counter is handed out twice.
func (s *Service) JoinSamplingSession(ctx context.Context, tenant, samplerID string) (counter int64, err error) {
	ctx = telemetry.WithKeys(ctx, telemetry.Keys{SamplingSessionID: samplerID})
	ctx, sp := telemetry.StartSpan(ctx, s.tel.Tracer(telemetry.ScopeSamplingController), telemetry.SpanSCJoinSamplingSession)
	defer func() {
		if sp.IsRecording() {
			sp.SetAttributes(attribute.Int64(telemetry.AttrClientCounter, counter))
		}
		telemetry.End(sp, err)
	}()
	s.lock(lkSessions | lkSamplers)
	sm, ok := s.samplers.get(samplerID)
	if !ok || sm.Tenant != tenant {
		s.unlock(lkSessions | lkSamplers)
		return 0, s.settle(miss(keySampler+samplerID, tenant, notFoundf("sampler %q not found", samplerID)))
	}
	if err := finishedErr(s.sessions.at(sm.SessionID)); err != nil {
		s.unlock(lkSessions | lkSamplers)
		return 0, err
	}
	if sm.Closed {
		s.unlock(lkSessions | lkSamplers)
		return 0, closedError(sm)
	}
	if sm.Clients >= maxClones {
		s.unlock(lkSessions | lkSamplers)
		return 0, invalidf("sampling session %s has %d clients, the most its seq_ids can number (each clone uses counter × 10^9)", samplerID, sm.Clients)
	}
	sm.Clients++
	counter = sm.Clients
	c := *sm
	s.unlock(lkSessions | lkSamplers)
	if err := putJSON(ctx, s.st, keySampler+c.ID, &c); err != nil {
		return 0, classify(err)
	}
	return counter, nil
}

// maxClones keeps clone seq_ids (counter × 10^9 + n) far inside an int64.
const maxClones = 1_000_000_000
