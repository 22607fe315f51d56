package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
)

// create_sampling_session takes base_model, model_path, or both when they agree (as
// tinker-cookbook sends them for a teacher); a disagreement or neither is a 400 naming
// the problem.
func TestCreateSamplingSessionBaseModelAndPath(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	sess := h.session(h.a)
	model := h.model(h.a, sess, 0, 4)
	var f future
	h.a.Post("/api/v1/save_weights_for_sampler", map[string]any{"model_id": model, "path": "teacher", "seq_id": 1}, &f)
	var saved struct{ Path string }
	h.a.Result(f.RequestID, &saved)

	for i, tc := range []struct {
		body map[string]any
		code int
		want string
	}{
		{map[string]any{"model_path": saved.Path, "base_model": testenv.Model}, http.StatusOK, ""},
		{map[string]any{"model_path": saved.Path}, http.StatusOK, ""},
		{map[string]any{"base_model": testenv.Model}, http.StatusOK, ""},
		{map[string]any{"model_path": saved.Path, "base_model": "other/model"}, http.StatusBadRequest, "does not match model_path"},
		{map[string]any{}, http.StatusBadRequest, "needs base_model or model_path"},
	} {
		tc.body["session_id"] = sess
		tc.body["sampling_session_seq_id"] = i
		r := h.a.Do("POST", "/api/v1/create_sampling_session", tc.body, nil)
		if r.Status != tc.code || !strings.Contains(string(r.Body), tc.want) {
			t.Errorf("%v: %d %s, want %d naming %q", tc.body, r.Status, r.Body, tc.code, tc.want)
		}
	}
}
