package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// maxReadBytes bounds an API reply a page reads in process (a list of runs or
// checkpoints); a longer one is an error, not a truncated page. Not a config key: it
// guards the console's memory against its own reads, which ask for bounded pages.
const maxReadBytes = 32 << 20

// recorder holds an in-process API reply a page reads.
type recorder struct {
	header http.Header
	code   int
	wrote  bool // the status is set
	body   bytes.Buffer
	over   bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK) // as net/http: a write without a status is a 200
	if r.body.Len()+len(b) > maxReadBytes {
		r.over = true
		return 0, fmt.Errorf("console: API reply over %d bytes", maxReadBytes)
	}
	return r.body.Write(b)
}

// reply is an API answer read in process.
type reply struct {
	Status int
	Body   []byte
	Header http.Header
}

// detail is the error message of an API error reply, for a page to show.
func (p reply) detail() string {
	var e struct {
		Detail string `json:"detail"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(p.Body, &e) == nil {
		if e.Detail != "" {
			return e.Detail
		}
		if e.Error != nil && e.Error.Message != "" {
			return e.Error.Message
		}
	}
	return http.StatusText(p.Status)
}

// call sends one request to the API in process with key, as the user's browser request
// orig (its context, address and host), and reads the whole reply.
func (c *Console) call(ctx context.Context, orig *http.Request, key, method, target string, body any) (reply, error) {
	var rd io.Reader = http.NoBody
	var n int64
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return reply{}, err
		}
		rd, n = bytes.NewReader(b), int64(len(b))
	}
	u, err := url.Parse(target)
	if err != nil {
		return reply{}, err
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return reply{}, err
	}
	req.ContentLength = n
	req.RequestURI = u.RequestURI()
	req.RemoteAddr, req.Host, req.TLS = orig.RemoteAddr, orig.Host, orig.TLS
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: http.Header{}}
	c.api.ServeHTTP(rec, req)
	if rec.over {
		return reply{}, fmt.Errorf("%s %s: reply over %d bytes", method, u.Path, maxReadBytes)
	}
	rec.WriteHeader(http.StatusOK) // a reply that wrote nothing is a 200, as net/http answers it
	return reply{Status: rec.code, Body: rec.body.Bytes(), Header: rec.header}, nil
}

// getJSON reads target as the session's tenant into v; a non-200 reply is returned
// (with v untouched) for the page to show.
func (c *Console) getJSON(r *http.Request, se *session, target string, v any) (reply, error) {
	p, err := c.call(r.Context(), r, se.key, http.MethodGet, target, nil)
	if err != nil || p.Status != http.StatusOK {
		return p, err
	}
	if err := json.Unmarshal(p.Body, v); err != nil {
		return p, fmt.Errorf("GET %s: %w", target, err)
	}
	return p, nil
}

// load GETs target into v for a page; on a transport error or a non-200 reply it writes
// the error page (failed) and reports false, and the page handler returns.
func (c *Console) load(w http.ResponseWriter, r *http.Request, se *session, target string, v any) bool {
	p, err := c.getJSON(r, se, target, v)
	if err != nil || p.Status != http.StatusOK {
		c.failed(w, r, se, p, err)
		return false
	}
	return true
}

// cursor is a listing reply's cursor (the part the pages show).
type cursor struct {
	Total int `json:"total_count"`
}
