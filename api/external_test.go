package api_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"filippo.io/age"
	"filippo.io/age/agessh"
	"golang.org/x/crypto/ssh"
)

type urlsReply struct {
	URLs    map[string]string `json:"urls"`
	Expires string            `json:"expires"`
}

func fetch(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// save_weights_external: the run's adapter in PEFT format as an external checkpoint,
// its files behind one signed link each (no API key), optionally age-encrypted to x25519
// or SSH recipients (stored only encrypted); listed, TTL'd and deleted like the others.
func TestSaveWeightsExternal(t *testing.T) {
	t.Parallel()
	h, cfg := newHarnessCfg(t, nil)
	sess := h.session(h.a)
	model := h.model(h.a, sess, 0, 4)
	seq := 0
	op := func(path string, body map[string]any) *http.Response {
		t.Helper()
		seq++
		body["model_id"], body["seq_id"] = model, seq
		r := h.a.Do("POST", path, body, nil)
		return &http.Response{StatusCode: r.Status, Body: io.NopCloser(bytes.NewReader(r.Body))}
	}
	result := func(resp *http.Response, out any) {
		t.Helper()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		var f future
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		h.a.Result(f.RequestID, out)
	}
	result(op("/api/v1/forward_backward", fwdbwdJSON(model, 0, datum(1, 8))), nil)
	result(op("/api/v1/optim_step", optim(model, 0, 0.01)), nil)
	var state struct{ Path string }
	result(op("/api/v1/save_weights", map[string]any{"path": "s"}), &state)

	type exportReply struct {
		Path      string `json:"path"`
		SizeBytes int64  `json:"size_bytes"`
		Type      string `json:"type"`
	}
	export := func(name string, extra map[string]any) exportReply {
		t.Helper()
		body := map[string]any{"path": name, "type": "save_weights_external"}
		for k, v := range extra {
			body[k] = v
		}
		var out exportReply
		result(op("/api/v1/save_weights_external", body), &out)
		if !strings.HasSuffix(out.Path, "/external_weights/"+name) || out.SizeBytes <= 0 || out.Type != "save_weights_external" {
			t.Fatalf("export result %+v", out)
		}
		return out
	}
	files := func(path string) map[string][]byte {
		t.Helper()
		run, id, _ := strings.Cut(strings.TrimPrefix(path, "tinker://"), "/")
		var u urlsReply
		h.a.Do("GET", "/api/v1/training_runs/"+run+"/checkpoints/"+id+"/external_weights_urls", nil, nil).JSON(t, &u)
		if u.Expires == "" || len(u.URLs) == 0 {
			t.Fatalf("urls %+v", u)
		}
		out := map[string][]byte{}
		for name, link := range u.URLs {
			code, b := fetch(t, link)
			if code != 200 {
				t.Fatalf("GET %s: %d %s", name, code, b)
			}
			out[name] = b
		}
		return out
	}
	names := func(m map[string][]byte) string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return strings.Join(ks, " ")
	}
	plain := export("plain", nil)
	got := files(plain.Path)
	if names(got) != "adapter_config.json adapter_model.safetensors" {
		t.Fatalf("export files: %s", names(got))
	}
	// The export is the adapter the training checkpoint holds, byte for byte.
	run := strings.Split(strings.TrimPrefix(state.Path, "tinker://"), "/")[0]
	var stateDir string
	_ = filepath.WalkDir(cfg.CheckpointDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasSuffix(p, filepath.Join("weights", "s")) && strings.Contains(p, strings.ReplaceAll(run, "/", "_")) {
			stateDir = p
		}
		return nil
	})
	for _, f := range []string{"adapter_config.json", "adapter_model.safetensors"} {
		want, err := os.ReadFile(filepath.Join(stateDir, f))
		if err != nil || !bytes.Equal(want, got[f]) {
			t.Fatalf("%s differs from the training checkpoint's (%v)", f, err)
		}
	}

	// Encrypted to an x25519 and an SSH recipient: every file is "<name>.age", and either
	// identity decrypts it to the plaintext export.
	xid, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	sshPub, _ := ssh.NewPublicKey(pub)
	sshID, err := agessh.NewEd25519Identity(priv)
	if err != nil {
		t.Fatal(err)
	}
	enc := export("enc", map[string]any{"age_encryption_recipients": []string{xid.Recipient().String(), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub)))},
		"ttl_seconds": 3600})
	encFiles := files(enc.Path)
	if names(encFiles) != "adapter_config.json.age adapter_model.safetensors.age" {
		t.Fatalf("encrypted export files: %s", names(encFiles))
	}
	for name, b := range encFiles {
		for _, id := range []age.Identity{xid, sshID} {
			r, err := age.Decrypt(bytes.NewReader(b), id)
			if err != nil {
				t.Fatalf("decrypt %s: %v", name, err)
			}
			clear, _ := io.ReadAll(r)
			if !bytes.Equal(clear, got[strings.TrimSuffix(name, ".age")]) {
				t.Fatalf("%s decrypts to something else than the plaintext export", name)
			}
		}
	}
	// No plaintext of the encrypted export on the server's disk.
	_ = filepath.WalkDir(cfg.CheckpointDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(p, filepath.Join("external_weights", "enc")) && !d.IsDir() && !strings.HasSuffix(p, ".age") {
			t.Errorf("plaintext file %s of an encrypted export", p)
		}
		return nil
	})

	// Listed with type external (and its TTL), refused as a training source, deleted.
	var list struct {
		Checkpoints []struct {
			CheckpointID   string  `json:"checkpoint_id"`
			CheckpointType string  `json:"checkpoint_type"`
			TinkerPath     string  `json:"tinker_path"`
			ExpiresAt      *string `json:"expires_at"`
		} `json:"checkpoints"`
	}
	h.a.Do("GET", "/api/v1/training_runs/"+run+"/checkpoints", nil, nil).JSON(t, &list)
	types := map[string]string{}
	for _, c := range list.Checkpoints {
		types[c.CheckpointID] = c.CheckpointType
		if c.CheckpointID == "external_weights/enc" && c.ExpiresAt == nil {
			t.Error("the export's ttl_seconds was not kept")
		}
	}
	if types["external_weights/plain"] != "external" || types["external_weights/enc"] != "external" || types["weights/s"] != "training" {
		t.Fatalf("listed types %v", types)
	}
	if r := h.a.Do("POST", "/api/v1/load_weights", map[string]any{"session_id": sess, "model_seq_id": 7, "path": enc.Path, "optimizer": false}, nil); r.Status != 400 ||
		!strings.Contains(string(r.Body), "export") {
		t.Fatalf("load from an export: %d %s", r.Status, r.Body)
	}
	if r := h.a.Do("GET", "/api/v1/training_runs/"+run+"/checkpoints/weights/s/external_weights_urls", nil, nil); r.Status != 400 {
		t.Fatalf("urls of a training checkpoint: %d %s", r.Status, r.Body)
	}
	if r := h.b.Do("GET", "/api/v1/training_runs/"+run+"/checkpoints/external_weights/plain/external_weights_urls", nil, nil); r.Status != 404 {
		t.Fatalf("another tenant's urls: %d %s", r.Status, r.Body)
	}
	// Published, an export is every tenant's to download.
	if r := h.a.Do("POST", "/api/v1/training_runs/"+run+"/checkpoints/external_weights/plain/publish", nil, nil); r.Status != 204 {
		t.Fatalf("publish: %d %s", r.Status, r.Body)
	}
	var u urlsReply
	h.b.Do("GET", "/api/v1/training_runs/"+run+"/checkpoints/external_weights/plain/external_weights_urls", nil, nil).JSON(t, &u)
	if code, b := fetch(t, u.URLs["adapter_model.safetensors"]); code != 200 || !bytes.Equal(b, got["adapter_model.safetensors"]) {
		t.Fatalf("another tenant downloads a published export: %d", code)
	}
	h.a.Do("DELETE", "/api/v1/training_runs/"+run+"/checkpoints/external_weights/plain/publish", nil, nil)
	h.a.Do("GET", "/api/v1/training_runs/"+run+"/checkpoints/external_weights/plain/external_weights_urls", nil, nil).JSON(t, &u)
	link := u.URLs["adapter_config.json"]
	if code, _ := fetch(t, strings.Replace(link, "/adapter_config.json", "/adapter_model.safetensors", 1)); code != 403 {
		t.Fatalf("a link for another file: %d", code)
	}
	if code, _ := fetch(t, link[:len(link)-len("/adapter_config.json")-3]+"xyz/adapter_config.json"); code != 403 {
		t.Fatalf("a forged link: %d", code)
	}
	if r := h.a.Do("DELETE", "/api/v1/training_runs/"+run+"/checkpoints/external_weights/plain", nil, nil); r.Status != 204 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	if code, _ := fetch(t, link); code != 404 {
		t.Fatalf("a link to a deleted export: %d", code)
	}

	// Refusals name the problem and settle the seq_id.
	for _, bad := range []struct {
		extra map[string]any
		want  string
	}{
		{map[string]any{"age_encryption_recipients": []string{"age1notakey"}}, "age_encryption_recipients[0]"},
		{map[string]any{"age_encryption_recipients": []string{"pgp-key"}}, "age_encryption_recipients[0]"},
		{map[string]any{"age_encryption_recipients": make([]string, 11)}, "at most 10"},
		{map[string]any{"ttl_seconds": -1}, "ttl_seconds"},
	} {
		body := map[string]any{"path": "bad"}
		for k, v := range bad.extra {
			body[k] = v
		}
		resp := op("/api/v1/save_weights_external", body)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 400 || !strings.Contains(string(b), bad.want) {
			t.Errorf("%v: %d %s, want 400 naming %s", bad.extra, resp.StatusCode, b, bad.want)
		}
	}
	result(op("/api/v1/forward_backward", fwdbwdJSON(model, 0, datum(1, 8))), nil)
}
