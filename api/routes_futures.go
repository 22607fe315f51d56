package api

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/telemetry"
)

// Handlers of futures: the long poll for a result, and the result in the form the
// client accepts.

func (h *Handler) retrieveFuture(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.FutureRetrieveRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	r = annotate(r, telemetry.Keys{RequestID: req.RequestID})
	ctx, cancel := h.waitCtx(r.Context())
	defer cancel()
	rec, err := h.svc.Retrieve(ctx, tenant, req.RequestID, h.opt.LongPoll)
	if err != nil {
		if r.Context().Err() != nil {
			// The client went away (or timed out) during the long-poll: nobody to answer,
			// and nothing went wrong here.
			h.log.DebugContext(r.Context(), "client left during a long-poll", "request_id", req.RequestID)
			return
		}
		if ctx.Err() != nil {
			// Shutting down: answer try_again so the client polls the next server.
			textgen.WriteJSON(w, encodingFailed, http.StatusRequestTimeout, wire.TryAgainResponse{Type: "try_again", RequestID: req.RequestID, QueueState: "active"})
			return
		}
		h.fail(w, r, err)
		return
	}
	switch rec.Status {
	case futures.Status("ready"):
		h.writeResult(w, r, rec.Result)
	case futures.Status("failed"):
		f := rec.Failure
		if f == nil {
			f = &futures.Failure{Message: "operation failed", Category: "unknown"}
		}
		textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.RequestFailedResponse{Error: f.Message, Category: string(f.Category)})
	default:
		qs := rec.QueueState
		if qs == "" {
			qs = "active"
		}
		textgen.WriteJSON(w, encodingFailed, http.StatusRequestTimeout, wire.TryAgainResponse{Type: "try_again", RequestID: req.RequestID, QueueState: qs})
	}
}

// writeResult answers with the stored result, converting protobuf results to JSON for
// clients that did not ask for protobuf (SDK 0.24 and older).
func (h *Handler) writeResult(w http.ResponseWriter, r *http.Request, res *futures.Result) {
	if res == nil {
		textgen.WriteJSON(w, encodingFailed, http.StatusOK, map[string]any{})
		return
	}
	if res.ContentType == ctProto && !strings.Contains(r.Header.Get("Accept"), "application/x-protobuf") {
		var b []byte
		var err error
		switch res.Kind {
		case kindForwardBackward:
			b, err = wire.ForwardBackwardOutputProtoToJSON(res.Body)
		case kindSample:
			b, err = wire.SampleResponseProtoToJSON(res.Body)
		default:
			err = fmt.Errorf("unknown result kind %q", res.Kind)
		}
		if err != nil {
			h.fail(w, r, fmt.Errorf("convert result to JSON: %w", err))
			return
		}
		w.Header().Set("Content-Type", ctJSON)
		_, _ = w.Write(b)
		return
	}
	w.Header().Set("Content-Type", res.ContentType)
	_, _ = w.Write(res.Body)
}
