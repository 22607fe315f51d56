package api

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/telemetry"
)

// The sampling routes newer SDKs use when the server advertises them: cancel_future
// (dynamic config sample_cancel_enabled), retrieve_futures (sample_use_retrieve_futures)
// and join_sampling_session (sample_join_sampling_session).

// cancelFuture stops a sampling request whose caller gave up: queued, it fails at once;
// running, it stops at its next decoding step.
func (h *Handler) cancelFuture(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.CancelFutureRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	if req.RequestID == "" {
		h.badRequest(w, r, fmt.Errorf("request_id is required"))
		return
	}
	r = annotate(r, telemetry.Keys{RequestID: req.RequestID, OperationType: telemetry.OpSample})
	state, err := h.svc.CancelSample(r.Context(), tenant, req.RequestID)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.CancelFutureResponse{RequestID: req.RequestID, State: state})
}

// retrieveFutures is one poll of a sampling session's completions (see
// service/futurespoll.go): those after prev_cursor, held up to the long poll (or the
// request's shorter timeout; 0 answers at once) while there are none.
func (h *Handler) retrieveFutures(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.FuturesRetrieveRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	t := req.Target
	switch {
	case t == nil:
		h.badRequest(w, r, fmt.Errorf("target is required: {\"type\": \"sampling_session\", \"sampling_session_id\": ...}"))
		return
	case t.Type != "" && t.Type != "sampling_session":
		h.badRequest(w, r, fmt.Errorf("target.type %q is not supported: the only target is \"sampling_session\"", t.Type))
		return
	case t.SamplingSessionID == "":
		h.badRequest(w, r, fmt.Errorf("target.sampling_session_id is required"))
		return
	case len(req.RetrievedRequestIDs) > h.opt.Limits.MaxRetrievedRequestIDs:
		h.badRequest(w, r, fmt.Errorf("retrieved_request_ids has %d ids, more than limits.max_retrieved_request_ids %d", len(req.RetrievedRequestIDs), h.opt.Limits.MaxRetrievedRequestIDs))
		return
	}
	wait := h.opt.LongPoll
	if req.Timeout != nil {
		tv := *req.Timeout
		if math.IsNaN(tv) || tv < 0 {
			h.badRequest(w, r, fmt.Errorf("timeout %v must be a number of seconds ≥ 0", tv))
			return
		}
		if d := time.Duration(tv * float64(time.Second)); d < wait {
			wait = d
		}
	}
	r = annotate(r, telemetry.Keys{SamplingSessionID: t.SamplingSessionID, OperationType: telemetry.OpSample})
	ctx, cancel := h.waitCtx(r.Context())
	defer cancel()
	events, cursor, err := h.svc.RetrieveFutures(ctx, tenant, t.SamplingSessionID, t.ClonedSamplerID, req.PrevCursor, wait)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client left during the long poll
		}
		if ctx.Err() != nil { // shutting down: nothing new, poll again (the next server)
			textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.FuturesRetrieveResponse{Completions: []wire.FutureCompletion{}, Cursor: req.PrevCursor})
			return
		}
		h.fail(w, r, err)
		return
	}
	resp := wire.FuturesRetrieveResponse{Completions: make([]wire.FutureCompletion, 0, len(events)), Cursor: cursor}
	for _, ev := range events {
		c := wire.FutureCompletion{State: "finished", RequestID: ev.RequestID}
		if ev.Failed {
			c.State = "failed"
		} else {
			size := ev.PayloadSize
			c.ResponsePayloadUncompressedSize = &size
		}
		resp.Completions = append(resp.Completions, c)
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, resp)
}

// joinSamplingSession gives a cloned SamplingClient its counter.
func (h *Handler) joinSamplingSession(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.JoinSamplingSessionRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	if req.SamplingSessionID == "" {
		h.badRequest(w, r, fmt.Errorf("sampling_session_id is required"))
		return
	}
	r = annotate(r, telemetry.Keys{SamplingSessionID: req.SamplingSessionID})
	n, err := h.svc.JoinSamplingSession(r.Context(), tenant, req.SamplingSessionID)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.JoinSamplingSessionResponse{Type: "join_sampling_session", ClientCounter: n})
}
