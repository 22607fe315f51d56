package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
)

// With several API replicas, a request about a session that another replica owns is
// forwarded there (method, path, headers, the decoded body) and the owner's reply is
// relayed: the client may talk to any replica.

// forwardedHeader marks a forwarded request, so a stale ownership view cannot bounce a
// request between replicas.
const forwardedHeader = "X-Tuft-Forwarded-By"

var peerClient = &http.Client{Timeout: 2 * time.Minute}

// relay sends r to the replica that owns what it is about, with the body the body layer
// read (decoded: the layer dropped its Content-Encoding). It reports false when it wrote
// nothing (a single server, or a request that did not pass the layers), leaving the
// error to the caller.
func (h *Handler) relay(w http.ResponseWriter, r *http.Request, ee *service.ElsewhereError) bool {
	hb, _ := r.Body.(*textgen.HeldBody)
	if h.svc.ReplicaID() == "" || hb == nil {
		return false
	}
	if by := r.Header.Get(forwardedHeader); by != "" {
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Category: "server",
			Detail: fmt.Sprintf("%s, but replica %s forwarded the request here; ownership is changing, retry", ee.Error(), by)})
		return true
	}
	url, ok := h.svc.ReplicaURL(r.Context(), ee.Owner)
	if !ok {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Category: "server",
			Detail: fmt.Sprintf("%s, which is not running now; retry when it is back", ee.Error())})
		return true
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, url+r.URL.RequestURI(), bytes.NewReader(hb.Bytes()))
	if err != nil {
		return false
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	req.Header.Set(forwardedHeader, h.svc.ReplicaID())
	telemetry.Propagator().Inject(r.Context(), propagation.HeaderCarrier(req.Header))
	resp, err := peerClient.Do(req)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return true // the client went away
		}
		w.Header().Set("Retry-After", "2")
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Category: "server",
			Detail: fmt.Sprintf("%s, which did not answer: %v", ee.Error(), err)})
		return true
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
	return true
}
