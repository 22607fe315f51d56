// Package openai serves the OpenAI-compatible inference routes under /oai/api/v1 (the
// path Tinker and the Python TuFT use): GET /models, POST /completions and POST
// /chat/completions, on base models and on trained checkpoints, streamed as server-sent
// events or whole. Requests run through the service's sampling path (textgen), so they
// share the Tinker routes' keys, limits, fair queue and telemetry. docs/openai.md lists
// what is supported and how each OpenAI parameter is treated.
package openai

import (
	"errors"
	"net/http"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
)

// Prefix is where the routes are mounted.
const Prefix = "/oai/api/v1"

type handler struct {
	d textgen.Deps
}

// Mount registers the routes on mux.
func Mount(mux textgen.Mux, d textgen.Deps) {
	h := &handler{d: d.WithDefaults()}
	mux.HandleFunc("GET "+Prefix+"/models", h.authed(h.models))
	mux.HandleFunc("GET "+Prefix+"/models/{model...}", h.authed(h.model))
	mux.HandleFunc("POST "+Prefix+"/completions", h.authed(h.completions))
	mux.HandleFunc("POST "+Prefix+"/chat/completions", h.authed(h.chat))
	mux.HandleFunc("POST "+Prefix+"/chat/render", h.authed(h.chatRender))
	mux.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		textgen.WriteJSON(w, encodingFailed, http.StatusNotFound, (&apiError{Type: "invalid_request_error", Code: "unknown_url",
			Message: "Unknown request URL: " + r.Method + " " + r.URL.Path + ". This server serves GET /models, POST /completions, POST /chat/completions and POST /chat/render under " + Prefix + "."}).body())
	})
}

func (h *handler) authed(f func(w http.ResponseWriter, r *http.Request, tenant string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tenant, err := h.d.Authenticate(r)
		if err != nil {
			writeError(w, err)
			return
		}
		f(w, r, tenant)
	}
}

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Root    string `json:"root,omitempty"` // the base model a checkpoint runs on
}

type modelList struct {
	Object string        `json:"object"`
	Data   []modelObject `json:"data"`
}

func toModelObject(m service.InferenceModel) modelObject {
	o := modelObject{ID: m.ID, Object: "model", OwnedBy: m.OwnedBy, Root: m.BaseModel}
	if !m.Created.IsZero() {
		o.Created = m.Created.Unix()
	}
	return o
}

func (h *handler) models(w http.ResponseWriter, r *http.Request, tenant string) {
	out := modelList{Object: "list", Data: []modelObject{}}
	for _, m := range h.d.Service.InferenceModels(r.Context(), tenant) {
		out.Data = append(out.Data, toModelObject(m))
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, out)
}

// model answers GET /models/{model}; a tinker:// id arrives with its "//" folded to "/"
// by some clients' path handling, so both spellings are accepted.
func (h *handler) model(w http.ResponseWriter, r *http.Request, tenant string) {
	id := r.PathValue("model")
	t, err := h.d.Service.ResolveInference(tenant, id)
	if err != nil && len(id) > 8 && id[:8] == "tinker:/" && (len(id) < 9 || id[8] != '/') {
		t, err = h.d.Service.ResolveInference(tenant, "tinker://"+id[8:])
	}
	if err != nil {
		writeError(w, err)
		return
	}
	for _, m := range h.d.Service.InferenceModels(r.Context(), tenant) {
		if m.ID == t.Model || (t.Checkpoint == "" && m.ID == t.BaseModel) {
			textgen.WriteJSON(w, encodingFailed, http.StatusOK, toModelObject(m))
			return
		}
	}
	// A published checkpoint of another tenant: visible, though not in the list.
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, modelObject{ID: t.Model, Object: "model", OwnedBy: "tuft", Root: t.BaseModel})
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func usageOf(s textgen.Summary) *usage {
	return &usage{PromptTokens: s.PromptTokens, CompletionTokens: s.CompletionTokens, TotalTokens: s.PromptTokens + s.CompletionTokens}
}

// run executes a generation and answers it: whole, or as the event stream w carries.
// Errors before the first event are plain error replies; later ones are an error event.
func (h *handler) run(w http.ResponseWriter, r *http.Request, tenant, op string, req textgen.Request, out responder) {
	textgen.GenAIRequest(r, op, req.Target, req)
	textgen.NoWriteDeadline(w)
	start := h.d.Now()
	first := true
	sum, err := textgen.Run(r.Context(), h.d.Service, tenant, req, func(p textgen.Piece) error {
		if first && p.Text != "" && req.Stream {
			first = false
			textgen.FirstToken(r, start)
		}
		return out.piece(p)
	})
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone; nobody reads a reply
		}
		if out.started() {
			out.fail(toAPIError(err))
			return
		}
		writeError(w, err)
		return
	}
	textgen.GenAIResponse(r, out.id(), req.Target.Model, sum, out.finishReasons())
	if err := out.done(sum); err != nil && !errors.Is(err, http.ErrHandlerTimeout) {
		h.d.Log.DebugContext(r.Context(), "could not finish the response", "error", err)
	}
}

// responder writes one route's response format.
type responder interface {
	piece(p textgen.Piece) error
	done(sum textgen.Summary) error
	fail(e *apiError)
	started() bool
	id() string
	finishReasons() []string
}

func (h *handler) created() int64 { return h.d.Now().Unix() }

// op names for gen_ai.operation.name.
const (
	opChat       = telemetry.GenAIOpChat
	opCompletion = telemetry.GenAIOpTextCompletion
)
