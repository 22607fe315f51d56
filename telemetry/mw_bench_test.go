package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkHTTPMiddleware is the middleware's cost per request with telemetry disabled
// and with sampling 0 (metrics on, spans sampled out), on a route of a ServeMux.
func BenchmarkHTTPMiddleware(b *testing.B) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/optim_step", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	h := HTTPMiddleware(mux)
	for _, enabled := range []bool{false, true} {
		name := "disabled"
		if enabled {
			name = "sampling0"
		}
		b.Run(name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Enabled, cfg.SamplingRatio, cfg.OTLPEndpoint = enabled, 0, "127.0.0.1:1"
			cfg.Traces.Enabled, cfg.Logs.Enabled = false, false
			tel, err := Setup(context.Background(), cfg, "server", WithLogLevel("error"))
			if err != nil {
				b.Fatal(err)
			}
			defer tel.Shutdown(context.Background())
			req := httptest.NewRequest(http.MethodPost, "/api/v1/optim_step", nil)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, req)
			}
		})
	}
}

// With spans sampled out, the middleware allocates only its status recorder: the span
// start, the propagator and the duration histogram cost no allocation.
func TestHTTPMiddlewareSampledOutAllocations(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/optim_step", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	h := HTTPMiddleware(mux)
	cfg := DefaultConfig()
	cfg.Enabled, cfg.SamplingRatio, cfg.OTLPEndpoint = true, 0, "127.0.0.1:1"
	cfg.Traces.Enabled, cfg.Logs.Enabled = false, false
	tel, err := Setup(context.Background(), cfg, "server", WithLogLevel("error"))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	req := httptest.NewRequest(http.MethodPost, "/api/v1/optim_step", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req) // warm the attribute-set cache
	if n := testing.AllocsPerRun(200, func() { h.ServeHTTP(w, req) }); n > 1 {
		t.Fatalf("%v allocations per sampled-out request, want at most 1", n)
	}
}
