package api

import (
	"context"
	"net/http"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
)

// The Tinker asynchronous operations (create_model, forward_backward, forward,
// optim_step, save_weights, save_weights_for_sampler, save_weights_external,
// load_weights, unload_model, asample) answer a future: each route only turns its body
// into an operation (decode, address, validate), and opRoute does the rest the same way
// for all of them: the refusal that settles the operation's seq_id, the correlation
// keys, the service call (operation.submit), the future reply. A test in tests/layers
// keeps the service's future-making calls (those an operation.submit makes) in
// operation.submit, and the submit call and the future reply here.

// operation is one asynchronous operation, decoded.
type operation struct {
	// name is the operation (telemetry.Op*): what a refusal settles it as.
	name string
	// settle is the address a refusal settles (see refuse); ModelID "" settles nothing
	// (an operation without a seq_id, or before its run exists).
	settle service.OpMeta
	// keys annotate the request's span and the futures it enqueues.
	keys telemetry.Keys
	// submit enqueues the operation and returns its future's id (the service encodes its
	// result with the encoder wired into it once: ResultEncoder).
	submit func(ctx context.Context) (string, error)
	// model is the run the reply names (model_id; "" for none).
	model string
	// samples is the number of sequences an asample reply names (sample_sequence_ids).
	samples int
}

// opRoute is the route of an asynchronous operation: parse turns the request into an
// operation. An error of parse is the refusal, settling the operation parse returned
// with it (nil: nothing to settle).
func (h *Handler) opRoute(parse func(r *http.Request, tenant string, body []byte) (*operation, error)) func(w http.ResponseWriter, r *http.Request, tenant string) {
	return func(w http.ResponseWriter, r *http.Request, tenant string) {
		body, ok := h.readBody(w, r)
		if !ok {
			return
		}
		op, err := parse(r, tenant, body)
		if err != nil {
			if op == nil {
				h.fail(w, r, err)
				return
			}
			r = annotate(r, op.keys)
			h.refuse(w, r, tenant, op.settle, op.name, err)
			return
		}
		r = annotate(r, op.keys)
		id, err := op.submit(r.Context())
		if err != nil {
			h.refuse(w, r, tenant, op.settle, op.name, err)
			return
		}
		annotate(r, telemetry.Keys{RequestID: id})
		f := wire.UntypedAPIFuture{RequestID: id}
		if op.model != "" {
			f.ModelID = &op.model
		}
		if op.samples > 0 {
			f.SampleSequenceIDs = wire.SampleSequenceIDs(id, op.samples)
		}
		textgen.WriteJSON(w, encodingFailed, http.StatusOK, f)
	}
}

// decodeOp decodes an operation's JSON body into v. A body refused here still names the
// run and seq_id it holds (wire.OpAddress), so its refusal settles them.
func decodeOp(r *http.Request, body []byte, name string, v any) (*operation, error) {
	if err := wire.DecodeRequest(body, v); err != nil {
		model, seq, _ := wire.OpAddress(body)
		return &operation{name: name, settle: service.OpMeta{ModelID: model, SeqID: seq, PayloadHash: payloadHash(body), InOrder: inOrderSender(r)}}, invalid(err)
	}
	return nil, nil
}
