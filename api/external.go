package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/api/wire"
	"github.com/tuft-go/tuft/service"
	"github.com/tuft-go/tuft/telemetry"
)

// Weight export (see service/external.go): save_weights_external, the signed links of
// …/external_weights_urls, and the download route those links point at.

// saveWeightsExternal is a training operation with a seq_id: a refusal settles it.
func (h *Handler) saveWeightsExternal(r *http.Request, tenant string, body []byte) (*operation, error) {
	var req wire.SaveWeightsExternalRequest
	if op, err := decodeOp(r, body, telemetry.OpSaveWeightsExternal, &req); err != nil {
		return op, err
	}
	m := opMeta(r, req.ModelID, req.SeqID, body)
	o := &operation{name: telemetry.OpSaveWeightsExternal, settle: m, model: req.ModelID,
		keys: telemetry.Keys{TrainingRunID: req.ModelID, OperationType: telemetry.OpSaveWeightsExternal}}
	name := deref(req.Path)
	if name == "" {
		return o, invalid(fmt.Errorf("path (the export's name) is required"))
	}
	in := service.ExternalInput{OpMeta: m, Name: name, TTLSeconds: req.TTLSeconds, Recipients: req.AgeEncryptionRecipients}
	o.submit = func(ctx context.Context) (string, error) {
		return h.svc.SaveExternal(ctx, tenant, in)
	}
	return o, nil
}

// externalWeightsURLs answers GET …/checkpoints/external_weights/<name>/external_weights_urls:
// one signed link per file, served by this server, valid for the archive link lifetime.
func (h *Handler) externalWeightsURLs(w http.ResponseWriter, r *http.Request, tenant, runID, ckptID string) {
	c, files, err := h.svc.CheckpointFiles(tenant, runID, ckptID)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	resp := wire.ExternalWeightsURLsResponse{URLs: map[string]string{}}
	base := h.base(r)
	for _, f := range files {
		tok, exp := h.svc.FileToken(c, f, h.opt.ArchiveTTL)
		resp.URLs[f] = base + "/api/v1/external_weights/" + url.PathEscape(tok) + "/" + url.PathEscape(f)
		resp.Expires = exp.UTC()
	}
	textgen.WriteJSON(w, encodingFailed, http.StatusOK, resp)
}

// base is the URL signed links are built on.
func (h *Handler) base(r *http.Request) string {
	if p := h.publicURL.Load(); p != nil && *p != "" {
		return *p
	}
	return "http://" + r.Host
}

// externalFile serves one file of an export for a valid signed link (no API key: the
// link is the credential, as for archives).
func (h *Handler) externalFile(w http.ResponseWriter, r *http.Request) {
	file := r.PathValue("file")
	if file == "" || file != path.Base(file) || file == "." || file == ".." {
		textgen.WriteJSON(w, encodingFailed, http.StatusForbidden, errorBody{Detail: service.ErrBadToken.Error(), Category: "user"})
		return
	}
	f, err := h.svc.OpenFile(r.PathValue("token"), file)
	if err != nil {
		if errors.Is(err, service.ErrBadToken) {
			textgen.WriteJSON(w, encodingFailed, http.StatusForbidden, errorBody{Detail: err.Error(), Category: "user"})
			return
		}
		h.fail(w, r, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", file))
	http.ServeContent(w, r, file, f.ModTime, f)
}
