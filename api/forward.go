package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
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

// handOff is where a route's error writer (fail) leaves an ElsewhereError for
// forwardLayer, with the request as the route last had it (its context annotated).
type handOff struct {
	ee *service.ElsewhereError
	r  *http.Request
}

type handOffKey struct{}

// forwardLayer replays a request on the replica that owns what it is about. Only the
// route finds out (the service answers it an ElsewhereError), so the layer gives the
// route a hand-off slot, and the error writer puts the error there instead of writing
// it. On a single server, or without a held body (a public route), there is no slot.
func (h *Handler) forwardLayer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hb, _ := r.Body.(*textgen.HeldBody)
		if h.svc.ReplicaID() == "" || hb == nil {
			next.ServeHTTP(w, r)
			return
		}
		ho := &handOff{}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), handOffKey{}, ho)))
		if ho.ee != nil && !h.relay(w, ho.r, hb.Bytes(), ho.ee) {
			h.fail(w, r, ho.ee) // r carries no slot: fail writes it
		}
	})
}

// handedOff reports whether err is left to forwardLayer: an ElsewhereError on a request
// that passed it.
func handedOff(r *http.Request, err error) bool {
	var ee *service.ElsewhereError
	ho, _ := r.Context().Value(handOffKey{}).(*handOff)
	if ho == nil || ho.ee != nil || !errors.As(err, &ee) {
		return false
	}
	ho.ee, ho.r = ee, r
	return true
}

// relay sends r to the replica that owns what it is about, with body, the bytes the body
// layer held (decoded: the layer dropped its Content-Encoding). It reports false when it
// wrote nothing, leaving the error to the caller.
func (h *Handler) relay(w http.ResponseWriter, r *http.Request, body []byte, ee *service.ElsewhereError) bool {
	if by := r.Header.Get(forwardedHeader); by != "" {
		textgen.WriteJSON(w, encodingFailed, http.StatusServiceUnavailable, errorBody{Category: "server",
			Detail: fmt.Sprintf("%s, but replica %s forwarded the request here; ownership is changing, retry", ee.Error(), by)})
		return true
	}
	url, ok := h.svc.ReplicaURL(r.Context(), ee.Owner)
	if !ok {
		w.Header().Set("Retry-After", "5")
		textgen.WriteJSON(w, encodingFailed, http.StatusServiceUnavailable, errorBody{Category: "server",
			Detail: fmt.Sprintf("%s, which is not running now; retry when it is back", ee.Error())})
		return true
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, url+r.URL.RequestURI(), bytes.NewReader(body))
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
		textgen.WriteJSON(w, encodingFailed, http.StatusServiceUnavailable, errorBody{Category: "server",
			Detail: fmt.Sprintf("%s, which did not answer: %v", ee.Error(), err)})
		return true
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// A long-lived stream gives back its request slot here too, as on the owner
		// (detachStream); past this replica's stream slots it keeps the request slot.
		if t := ticketFrom(r.Context()); t != nil {
			if release, err := t.detachStream(); err == nil {
				defer release()
			}
		}
		relayEvents(w, resp.Body)
		return true
	}
	_, _ = io.Copy(w, resp.Body)
	return true
}

// relayEvents copies an event stream as it comes, flushing each read: buffered, the
// owner's events would reach the client only when the buffer fills.
func relayEvents(w http.ResponseWriter, body io.Reader) {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil || rc.Flush() != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
