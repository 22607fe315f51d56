package api_test

import (
	"strings"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
)

// copy_weights: a copy into a session's run slot or one of the caller's projects, never
// into another tenant's; X-Idempotency-Key makes a retry return the first copy; the copy
// trains like its source.
func TestCopyWeights(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	sess := h.session(h.a)
	model := h.model(h.a, sess, 0, 4)
	var f future
	h.a.Post("/api/v1/save_weights", map[string]any{"model_id": model, "seq_id": 1, "path": "src", "ttl_seconds": 7200}, &f)
	var saved struct{ Path string }
	h.a.Result(f.RequestID, &saved)
	copyReq := func(c *testenv.Client, key string, body map[string]any) *testenv.Response {
		hdr := map[string]string{}
		if key != "" {
			hdr["X-Idempotency-Key"] = key
		}
		return c.Do("POST", "/api/v1/copy_weights", body, hdr)
	}
	var out struct {
		TinkerPath string `json:"tinker_path"`
	}
	r := copyReq(h.a, "k1", map[string]any{"source_path": saved.Path, "session_id": sess, "model_seq_id": 3})
	r.JSON(t, &out)
	if out.TinkerPath != "tinker://"+sess+":train:3/weights/src" {
		t.Fatalf("session copy: %d %s", r.Status, r.Body)
	}
	first := out.TinkerPath
	copyReq(h.a, "k1", map[string]any{"source_path": saved.Path, "session_id": sess, "model_seq_id": 3}).JSON(t, &out)
	if out.TinkerPath != first {
		t.Fatalf("retry with the same key: %s, want %s", out.TinkerPath, first)
	}
	if r := copyReq(h.a, "k1", map[string]any{"source_path": saved.Path, "destination_project_id": "alice"}); r.Status != 409 {
		t.Fatalf("same key, another body: %d %s", r.Status, r.Body)
	}
	// To a project: the tenant's own (its name, or a session's project).
	r = copyReq(h.a, "k2", map[string]any{"source_path": saved.Path, "destination_project_id": "alice", "ttl_seconds": 3600})
	r.JSON(t, &out)
	if !strings.HasPrefix(out.TinkerPath, "tinker://copy_") || !strings.HasSuffix(out.TinkerPath, "/weights/src") {
		t.Fatalf("project copy: %d %s", r.Status, r.Body)
	}
	projectCopy := out.TinkerPath
	for _, bad := range []struct {
		c    *testenv.Client
		body map[string]any
		code int
		want string
	}{
		{h.a, map[string]any{"source_path": saved.Path, "destination_project_id": "bob"}, 404, "project"},
		{h.b, map[string]any{"source_path": saved.Path, "destination_project_id": "bob"}, 404, "not found"},
		{h.a, map[string]any{"source_path": saved.Path, "session_id": sess, "model_seq_id": 3}, 409, "already exists"},
		{h.a, map[string]any{"source_path": saved.Path, "session_id": sess}, 400, "model_seq_id"},
		{h.a, map[string]any{"source_path": saved.Path}, 400, "destination_project_id"},
		{h.a, map[string]any{"source_path": saved.Path, "destination_project_id": "alice", "weights_access_token": "t"}, 400, "weights_access_token"},
		{h.a, map[string]any{"source_path": "tinker://x/weights/nope", "destination_project_id": "alice"}, 404, "not found"},
	} {
		if r := copyReq(bad.c, "", bad.body); r.Status != bad.code || !strings.Contains(string(r.Body), bad.want) {
			t.Errorf("%v: %d %s, want %d naming %s", bad.body, r.Status, r.Body, bad.code, bad.want)
		}
	}
	// A copy trains: create-via-load from it, with its optimizer state.
	var lf future
	h.a.Post("/api/v1/load_weights", map[string]any{"session_id": sess, "model_seq_id": 4, "path": projectCopy, "optimizer": true}, &lf)
	h.a.Result(lf.RequestID, nil)
	h.a.Post("/api/v1/forward_backward", fwdbwdJSON(lf.ModelID, 1, datum(1, 8)), &f)
	h.a.Result(f.RequestID, nil)
	// The copies are the caller's checkpoints, listed with the rest.
	var all struct {
		Checkpoints []struct {
			TinkerPath string `json:"tinker_path"`
		} `json:"checkpoints"`
	}
	h.a.Do("GET", "/api/v1/checkpoints", nil, nil).JSON(t, &all)
	seen := map[string]bool{}
	for _, c := range all.Checkpoints {
		seen[c.TinkerPath] = true
	}
	if !seen[first] || !seen[projectCopy] || !seen[saved.Path] {
		t.Fatalf("checkpoints listed: %v", seen)
	}
}

// sessions/search over the caller's sessions (filters, owner, statuses, cursor paging);
// the storage report measures the caller's checkpoints on disk per project; the CLI's
// auth/apikey/me describes the key and refuses to delete a configured one.
func TestSessionSearchStorageAndAPIKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "memory")
	mk := func(name string, project string, meta map[string]any) string {
		var out struct {
			SessionID string `json:"session_id"`
		}
		body := map[string]any{"tags": []string{}, "user_metadata": meta, "sdk_version": "0.38.0", "display_name": name}
		if project != "" {
			body["project_id"] = project
		}
		h.a.Post("/api/v1/create_session", body, &out)
		return out.SessionID
	}
	s1 := mk("nightly run one", "", map[string]any{"team": "x"})
	s2 := mk("Nightly eval", "p2", map[string]any{"team": "y"})
	s3 := mk("adhoc", "", map[string]any{})
	h.session(h.b)
	model := h.model(h.a, s2, 0, 4)
	var f future
	h.a.Post("/api/v1/save_weights", map[string]any{"model_id": model, "seq_id": 1, "path": "c1"}, &f)
	h.a.Result(f.RequestID, nil)
	h.a.Post("/api/v1/sessions/"+s3+"/finish", map[string]any{"reason": map[string]any{"type": "errored"}}, nil)

	type page struct {
		Sessions []struct {
			SessionID              string            `json:"session_id"`
			Owner                  string            `json:"owner"`
			ProjectID              string            `json:"project_id"`
			Status                 map[string]any    `json:"status"`
			CheckpointsCount       int               `json:"checkpoints_count"`
			CheckpointStorageBytes int64             `json:"checkpoint_storage_bytes"`
			DisplayName            string            `json:"display_name"`
			UserMetadata           map[string]string `json:"user_metadata"`
		} `json:"sessions"`
		NextCursor map[string]any `json:"next_cursor"`
	}
	search := func(body map[string]any) (page, []string) {
		t.Helper()
		if _, ok := body["user_metadata"]; !ok {
			body["user_metadata"] = map[string]any{}
		}
		var p page
		h.a.Post("/api/v1/sessions/search", body, &p)
		var ids []string
		for _, s := range p.Sessions {
			ids = append(ids, s.SessionID)
		}
		return p, ids
	}
	ids := func(body map[string]any) string { _, x := search(body); return strings.Join(x, " ") }
	if got := ids(map[string]any{}); got != strings.Join([]string{s3, s2, s1}, " ") {
		t.Fatalf("all, newest first: %s", got)
	}
	if got := ids(map[string]any{"display_name": "NIGHTLY"}); got != s2+" "+s1 {
		t.Fatalf("display_name: %s", got)
	}
	if got := ids(map[string]any{"display_name": "nightly one"}); got != s1 {
		t.Fatalf("every word must appear: %s", got)
	}
	if got := ids(map[string]any{"display_name": "adhoc", "session_id": s1}); got != s3+" "+s1 {
		t.Fatalf("session_id or display_name: %s", got)
	}
	if got := ids(map[string]any{"user_metadata": map[string]any{"team": "y"}}); got != s2 {
		t.Fatalf("user_metadata: %s", got)
	}
	if got := ids(map[string]any{"project_ids": []string{"p2"}}); got != s2 {
		t.Fatalf("project_ids: %s", got)
	}
	if got := ids(map[string]any{"statuses": []any{map[string]any{"type": "client_finished", "reasons": []string{"errored"}}}}); got != s3 {
		t.Fatalf("statuses: %s", got)
	}
	if got := ids(map[string]any{"statuses": []any{map[string]any{"type": "active"}}, "owner": map[string]any{"type": "accessible"}}); got != s2+" "+s1 {
		t.Fatalf("active: %s", got)
	}
	if got := ids(map[string]any{"owner": map[string]any{"type": "user", "owner_urns": []string{"bob"}}}); got != "" {
		t.Fatalf("another owner's sessions: %s", got)
	}
	p, _ := search(map[string]any{"project_ids": []string{"p2"}})
	if s := p.Sessions[0]; s.CheckpointsCount != 1 || s.CheckpointStorageBytes <= 0 || s.Owner != "alice" || s.ProjectID != "p2" ||
		s.Status["type"] != "active" || s.DisplayName != "Nightly eval" || s.UserMetadata["team"] != "y" {
		t.Fatalf("summary %+v", s)
	}
	// Paging: two pages of one, then one, then none.
	var walked []string
	body := map[string]any{"limit": 1}
	for i := 0; i < 5; i++ {
		p, x := search(body)
		walked = append(walked, x...)
		if p.NextCursor == nil {
			break
		}
		body = map[string]any{"limit": 1, "cursor": p.NextCursor}
	}
	if strings.Join(walked, " ") != strings.Join([]string{s3, s2, s1}, " ") {
		t.Fatalf("paged: %v", walked)
	}
	for _, bad := range []struct {
		body map[string]any
		code int
		want string
	}{
		{map[string]any{"limit": 0}, 400, "limit"},
		{map[string]any{"project_ids": []string{"nope"}}, 404, "nope"},
		{map[string]any{"statuses": []any{map[string]any{"type": "gone"}}}, 400, "statuses[0].type"},
		{map[string]any{"owner": map[string]any{"type": "team"}}, 400, "owner.type"},
		{map[string]any{"statuses": []any{}}, 400, "statuses"},
	} {
		bad.body["user_metadata"] = map[string]any{}
		if r := h.a.Do("POST", "/api/v1/sessions/search", bad.body, nil); r.Status != bad.code || !strings.Contains(string(r.Body), bad.want) {
			t.Errorf("%v: %d %s, want %d naming %s", bad.body, r.Status, r.Body, bad.code, bad.want)
		}
	}

	// Storage: one checkpoint in p2, measured on disk.
	var usage struct {
		Data []struct {
			ProjectID       string  `json:"project_id"`
			CheckpointCount int     `json:"checkpoint_count"`
			SizeBytes       int64   `json:"size_bytes"`
			SizeGigabytes   float64 `json:"size_gigabytes"`
		} `json:"data"`
	}
	h.a.Do("GET", "/api/v1/billing/usage/checkpoints/current", nil, nil).JSON(t, &usage)
	if len(usage.Data) != 1 || usage.Data[0].ProjectID != "p2" || usage.Data[0].CheckpointCount != 1 || usage.Data[0].SizeBytes != p.Sessions[0].CheckpointStorageBytes ||
		usage.Data[0].SizeGigabytes != float64(usage.Data[0].SizeBytes)/1e9 {
		t.Fatalf("usage %+v", usage)
	}
	h.a.Do("GET", "/api/v1/billing/usage/checkpoints/current?project_id=alice", nil, nil).JSON(t, &usage)
	if len(usage.Data) != 0 {
		t.Fatalf("usage of a project without checkpoints: %+v", usage)
	}
	h.b.Do("GET", "/api/v1/billing/usage/checkpoints/current", nil, nil).JSON(t, &usage)
	if len(usage.Data) != 0 {
		t.Fatalf("bob's usage counts alice's checkpoints: %+v", usage)
	}

	// auth/apikey/me.
	var key struct {
		KeyID   int64  `json:"key_id"`
		Name    string `json:"name"`
		Details struct {
			OrgDetails struct{ Name string } `json:"org_details"`
		} `json:"details"`
	}
	h.a.Do("GET", "/api/v1/auth/apikey/me", nil, nil).JSON(t, &key)
	if key.KeyID <= 0 || key.Details.OrgDetails.Name != "alice" || !strings.Contains(key.Name, "alice") {
		t.Fatalf("apikey/me: %+v", key)
	}
	if r := h.a.Do("DELETE", "/api/v1/auth/apikey/me", nil, nil); r.Status != 403 || !strings.Contains(string(r.Body), "auth.api_keys") {
		t.Fatalf("delete a configured key: %d %s", r.Status, r.Body)
	}
	if r := (&testenv.Client{T: t, Base: h.url, Key: "tml-wrong", HTTP: h.a.HTTP}).Do("GET", "/api/v1/auth/apikey/me", nil, nil); r.Status != 401 {
		t.Fatalf("a wrong key: %d %s", r.Status, r.Body)
	}
	// The key still works.
	h.a.Do("GET", "/api/v1/auth/apikey/me", nil, nil).JSON(t, &key)
}
