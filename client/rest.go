package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tuft-go/tuft/api/wire"
)

// RestClient reads and manages training runs, checkpoints and sessions.
type RestClient struct{ c *conn }

// NewRestClient makes a REST client without opening a session.
func NewRestClient(baseURL, apiKey string, opts ...Option) (*RestClient, error) {
	c, err := newConn(baseURL, apiKey, opts)
	if err != nil {
		return nil, err
	}
	return &RestClient{c: c}, nil
}

// ListTrainingRuns lists the caller's runs, most recently used first.
func (r *RestClient) ListTrainingRuns(ctx context.Context, limit, offset int) (wire.TrainingRunsResponse, error) {
	var out wire.TrainingRunsResponse
	err := r.c.call(ctx, "GET", fmt.Sprintf("/api/v1/training_runs?limit=%d&offset=%d", limit, offset), nil, &out)
	return out, err
}

// GetTrainingRun describes one run.
func (r *RestClient) GetTrainingRun(ctx context.Context, runID string) (wire.TrainingRun, error) {
	var out wire.TrainingRun
	err := r.c.call(ctx, "GET", "/api/v1/training_runs/"+url.PathEscape(runID), nil, &out)
	return out, err
}

// ListCheckpoints lists one run's checkpoints (runID "") or all of the caller's.
func (r *RestClient) ListCheckpoints(ctx context.Context, runID string) ([]wire.Checkpoint, error) {
	var out wire.CheckpointsListResponse
	path := "/api/v1/checkpoints?limit=10000"
	if runID != "" {
		path = "/api/v1/training_runs/" + url.PathEscape(runID) + "/checkpoints"
	}
	err := r.c.call(ctx, "GET", path, nil, &out)
	return out.Checkpoints, err
}

// splitPath turns tinker://run/kind/name into the run id and checkpoint id.
func splitPath(p string) (run, ckpt string, err error) {
	rest, ok := strings.CutPrefix(p, "tinker://")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 {
		return "", "", fmt.Errorf("tuft: %q is not a tinker://<run>/<weights|sampler_weights>/<name> path", p)
	}
	return parts[0], parts[1] + "/" + parts[2], nil
}

func (r *RestClient) ckptCall(ctx context.Context, method, path, suffix string, body any) error {
	run, ck, err := splitPath(path)
	if err != nil {
		return err
	}
	return r.c.call(ctx, method, "/api/v1/training_runs/"+url.PathEscape(run)+"/checkpoints/"+ck+suffix, body, nil)
}

// DeleteCheckpoint deletes a checkpoint by its tinker:// path.
func (r *RestClient) DeleteCheckpoint(ctx context.Context, path string) error {
	return r.ckptCall(ctx, "DELETE", path, "", nil)
}

// Publish makes a checkpoint readable by every tenant; Unpublish undoes it.
func (r *RestClient) Publish(ctx context.Context, path string) error {
	return r.ckptCall(ctx, "POST", path, "/publish", nil)
}

// Unpublish makes a published checkpoint private again.
func (r *RestClient) Unpublish(ctx context.Context, path string) error {
	return r.ckptCall(ctx, "DELETE", path, "/publish", nil)
}

// SetTTL makes a checkpoint expire after ttl (0: never).
func (r *RestClient) SetTTL(ctx context.Context, path string, ttl time.Duration) error {
	var s *int64
	if ttl > 0 {
		v := int64(ttl / time.Second)
		s = &v
	}
	return r.ckptCall(ctx, "PUT", path, "/ttl", wire.CheckpointTTLRequest{TTLSeconds: s})
}

// ArchiveURL returns a signed, expiring link to a tar of the checkpoint.
func (r *RestClient) ArchiveURL(ctx context.Context, path string) (string, time.Time, error) {
	return r.archiveURL(ctx, path, "")
}

// ExportURL returns a signed, expiring link to a tar of the checkpoint exported in format
// (peft, hf, gguf, gguf-lora; see the server's docs/export.md) with quant for the GGUF
// formats (f16, bf16, q8_0; "" for the default). An unknown format is a 400 naming it.
func (r *RestClient) ExportURL(ctx context.Context, path, format, quant string) (string, time.Time, error) {
	q := url.Values{"format": {format}}
	if quant != "" {
		q.Set("quant", quant)
	}
	return r.archiveURL(ctx, path, "?"+q.Encode())
}

// DownloadExport streams the tar of the checkpoint exported in format into w (see
// ExportURL and Download).
func (r *RestClient) DownloadExport(ctx context.Context, path, format, quant string, w io.Writer, progress func(done, total int64)) (int64, error) {
	link, _, err := r.ExportURL(ctx, path, format, quant)
	if err != nil {
		return 0, err
	}
	return r.download(ctx, link, w, progress)
}

func (r *RestClient) archiveURL(ctx context.Context, path, query string) (string, time.Time, error) {
	run, ck, err := splitPath(path)
	if err != nil {
		return "", time.Time{}, err
	}
	resp, err := r.c.do(ctx, "GET", "/api/v1/training_runs/"+url.PathEscape(run)+"/checkpoints/"+ck+"/archive"+query, nil, "", "application/json", true)
	if err != nil {
		return "", time.Time{}, err
	}
	switch resp.status {
	case http.StatusFound:
		exp := time.Now().Add(15 * time.Minute)
		if t, err := http.ParseTime(resp.header.Get("Expires")); err == nil {
			exp = t
		}
		return resp.header.Get("Location"), exp, nil
	case http.StatusOK:
		var out wire.ArchiveURLResponse
		if err := json.Unmarshal(resp.body, &out); err != nil {
			return "", time.Time{}, err
		}
		return out.URL, out.Expires, nil
	}
	return "", time.Time{}, apiError(resp)
}

// Download streams the archive of a checkpoint into w, calling progress (which may be
// nil) with the bytes written so far and the total (-1 when unknown).
func (r *RestClient) Download(ctx context.Context, path string, w io.Writer, progress func(done, total int64)) (int64, error) {
	link, _, err := r.ArchiveURL(ctx, path)
	if err != nil {
		return 0, err
	}
	return r.download(ctx, link, w, progress)
}

func (r *RestClient) download(ctx context.Context, link string, w io.Writer, progress func(done, total int64)) (int64, error) {
	resp, err := r.getSigned(ctx, link)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var done int64
	buf := make([]byte, 256<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return done, err
			}
			done += int64(n)
			if progress != nil {
				progress(done, resp.ContentLength)
			}
		}
		if rerr == io.EOF {
			return done, nil
		}
		if rerr != nil {
			return done, rerr
		}
	}
}

// ListSessions lists the caller's sessions.
func (r *RestClient) ListSessions(ctx context.Context) ([]string, error) {
	var out wire.ListSessionsResponse
	err := r.c.call(ctx, "GET", "/api/v1/sessions?limit=1000", nil, &out)
	return out.Sessions, err
}

// getSigned fetches a signed link (it carries its own authorization); any answer but 200
// is an *APIError with the body.
func (r *RestClient) getSigned(ctx context.Context, link string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", link, nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.c.o.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, &APIError{Status: resp.StatusCode, Body: string(b)}
	}
	return resp, nil
}
