package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/tuft-go/tuft/api/wire"
)

// OptimStepDimuon applies one Dimuon step (the run must train with Dimuon: create it
// with LoraOptions.Optimizer = wire.Dimuon()).
func (t *TrainingClient) OptimStepDimuon(ctx context.Context, p wire.DimuonParams) (*Future[map[string]float64], error) {
	p.Type = "dimuon"
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	id, err := t.submitJSON(ctx, "/api/v1/optim_step", func(seq int64) any {
		return wire.OptimStepRequest{OptimizerParams: raw, ModelID: t.ModelID, SeqID: &seq, Type: "optim_step"}
	})
	if err != nil {
		return nil, err
	}
	return newFuture(t.c, id, false, func(b []byte, ct string) (map[string]float64, error) {
		r, err := jsonDecoder[wire.OptimStepResponse](b, ct)
		return r.Metrics, err
	}), nil
}

// SaveWeightsExternal exports the adapter in Hugging Face PEFT format as the external
// checkpoint name, encrypted to recipients (age x25519 or SSH public keys) when given,
// expiring after ttl (0: never). The future gives its tinker:// path.
func (t *TrainingClient) SaveWeightsExternal(ctx context.Context, name string, ttl time.Duration, recipients []string) (*Future[wire.SaveWeightsExternalResponse], error) {
	id, err := t.submitJSON(ctx, "/api/v1/save_weights_external", func(seq int64) any {
		req := wire.SaveWeightsExternalRequest{ModelID: t.ModelID, Path: &name, SeqID: &seq, AgeEncryptionRecipients: recipients, Type: "save_weights_external"}
		if ttl > 0 {
			s := int64(ttl / time.Second)
			req.TTLSeconds = &s
		}
		return req
	})
	if err != nil {
		return nil, err
	}
	return newFuture(t.c, id, false, jsonDecoder[wire.SaveWeightsExternalResponse]), nil
}

// ExternalWeightsURLs signs one download link per file of an external checkpoint
// (tinker://<run>/external_weights/<name>).
func (r *RestClient) ExternalWeightsURLs(ctx context.Context, path string) (wire.ExternalWeightsURLsResponse, error) {
	var out wire.ExternalWeightsURLsResponse
	run, ck, err := splitPath(path)
	if err != nil {
		return out, err
	}
	if !strings.HasPrefix(ck, "external_weights/") {
		return out, fmt.Errorf("tuft: %s is not an external weights checkpoint (tinker://<run>/external_weights/<name>)", path)
	}
	err = r.c.call(ctx, "GET", "/api/v1/training_runs/"+url.PathEscape(run)+"/checkpoints/"+ck+"/external_weights_urls", nil, &out)
	return out, err
}

// DownloadExternal downloads every file of an external checkpoint into dir (created;
// files already there are replaced). With identity, every file must be age-encrypted
// ("<name>.age") and is decrypted as it is written (without the suffix). Links are
// signed again when they are about to expire. It returns the file names written.
// progress, when not nil, gets each file's name and bytes written.
func (r *RestClient) DownloadExternal(ctx context.Context, path, dir string, identity age.Identity, progress func(file string, n int64)) ([]string, error) {
	urls, err := r.ExternalWeightsURLs(ctx, path)
	if err != nil {
		return nil, err
	}
	if len(urls.URLs) == 0 {
		return nil, fmt.Errorf("tuft: external checkpoint %s has no files", path)
	}
	names := make([]string, 0, len(urls.URLs))
	for n := range urls.URLs {
		if n != filepath.Base(n) || n == "." || n == ".." || strings.ContainsAny(n, `/\`) {
			return nil, fmt.Errorf("tuft: unsafe file name %q in %s", n, path)
		}
		if identity != nil && !strings.HasSuffix(n, ".age") {
			return nil, fmt.Errorf("tuft: %s in %s is not encrypted", n, path)
		}
		names = append(names, n)
	}
	sort.Strings(names)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	for _, n := range names {
		if time.Until(urls.Expires) < time.Minute {
			if urls, err = r.ExternalWeightsURLs(ctx, path); err != nil {
				return written, err
			}
		}
		out := n
		if identity != nil {
			out = strings.TrimSuffix(n, ".age")
		}
		size, err := r.fetchFile(ctx, urls.URLs[n], filepath.Join(dir, out), identity)
		if err != nil {
			return written, fmt.Errorf("tuft: download %s: %w", n, err)
		}
		if progress != nil {
			progress(out, size)
		}
		written = append(written, out)
	}
	return written, nil
}

// fetchFile writes one signed link's body (decrypted with identity, when given) to dst
// through a temporary file, so dst is whole or untouched.
func (r *RestClient) fetchFile(ctx context.Context, link, dst string, identity age.Identity) (int64, error) {
	resp, err := r.getSigned(ctx, link)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var src io.Reader = resp.Body
	if identity != nil {
		if src, err = age.Decrypt(resp.Body, identity); err != nil {
			return 0, fmt.Errorf("decrypt: %w", err)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+"-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, src)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, err
	}
	return n, os.Rename(tmp.Name(), dst)
}

// ExportAndDownload downloads a training checkpoint in Hugging Face PEFT format into
// dir, as tinker-cookbook's weights.download does: the checkpoint is loaded into a new
// run of this session, exported encrypted to a key made for this download, fetched and
// decrypted, and the export is deleted. The server never holds the plaintext export.
func (s *ServiceClient) ExportAndDownload(ctx context.Context, path, dir string, progress func(file string, n int64)) ([]string, error) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		return nil, err
	}
	tc, err := s.CreateTrainingClientFromState(ctx, path, false)
	if err != nil {
		return nil, err
	}
	f, err := tc.SaveWeightsExternal(ctx, "download", time.Hour, []string{id.Recipient().String()})
	if err != nil {
		return nil, err
	}
	res, err := f.Result(ctx)
	if err != nil {
		return nil, err
	}
	rest := s.REST()
	defer rest.DeleteCheckpoint(context.WithoutCancel(ctx), res.Path) //nolint:errcheck // it expires within the hour anyway
	return rest.DownloadExternal(ctx, res.Path, dir, id, progress)
}
