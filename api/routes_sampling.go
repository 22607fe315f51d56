package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
)

// Handlers of sampling sessions and sampling.

func (h *Handler) createSamplingSession(w http.ResponseWriter, r *http.Request, tenant string) {
	var req wire.CreateSamplingSessionRequest
	if _, ok := h.decode(w, r, &req); !ok {
		return
	}
	r = annotate(r, telemetry.Keys{SessionID: req.SessionID})
	base, path := deref(req.BaseModel), deref(req.ModelPath)
	sm, err := h.svc.CreateSamplingSession(r.Context(), tenant, req.SessionID, req.SamplingSessionSeqID, base, path)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	annotate(r, telemetry.Keys{SamplingSessionID: sm.ID})
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, wire.CreateSamplingSessionResponse{SamplingSessionID: sm.ID, Type: "create_sampling_session"})
}

func (h *Handler) getSampler(w http.ResponseWriter, r *http.Request, tenant string) {
	sm, err := h.svc.GetSampler(tenant, r.PathValue("sampler_id"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	resp := wire.GetSamplerResponse{SamplerID: sm.ID, BaseModel: sm.BaseModel}
	if sm.ModelPath != "" {
		resp.ModelPath = &sm.ModelPath
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, resp)
}

func (h *Handler) asample(r *http.Request, tenant string, body []byte) (*operation, error) {
	if id, ok := wire.PeekJSONString(body, "sampling_session_id"); ok && id != "" {
		if err := h.svc.CheckSampler(tenant, id); err != nil {
			return nil, err // before the costly decode, as for forward_backward
		}
	}
	call, err := wire.DecodeSampleRequest(body)
	if err != nil {
		return nil, invalid(err)
	}
	if call.ModelPath != "" && call.SamplingSessionID == "" {
		return nil, invalid(fmt.Errorf("asample with model_path is not supported: create a sampling session for the checkpoint first"))
	}
	in := service.SampleInput{SamplingSessionID: call.SamplingSessionID, BaseModel: call.BaseModel, SeqID: call.SeqID,
		PayloadHash: payloadHash(body), Req: sampleRequest(call.Req), PromptLogprobsLastN: call.PromptLogprobsLastN}
	return &operation{name: telemetry.OpSample, samples: call.Req.NumSamples,
		keys: telemetry.Keys{SamplingSessionID: call.SamplingSessionID, OperationType: telemetry.OpSample, BaseModel: call.BaseModel},
		submit: func(ctx context.Context) (string, error) {
			return h.svc.Sample(ctx, tenant, in)
		}}, nil
}
