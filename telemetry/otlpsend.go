package telemetry

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// spanSender delivers one encoded ExportTraceServiceRequest to the collector, retrying
// transient failures until ctx ends. It returns how many spans the collector rejected
// (OTLP partial success) beside any error.
type spanSender interface {
	send(ctx context.Context, req []byte) (rejected int64, err error)
	shutdown(ctx context.Context) error
}

// newSpanSender makes the sender of cfg.Protocol for endpoint ep. An endpoint without a
// scheme, or with http://, is plain text; https:// uses TLS with the system's roots.
func newSpanSender(cfg Config, ep string) (spanSender, error) {
	if cfg.Protocol == "http/protobuf" {
		return newHTTPSpanSender(ep, cfg.Headers)
	}
	return newGRPCSpanSender(ep, cfg.Headers)
}

// retryBackoff is the wait before retry n (0-based) of a transient export failure.
func retryBackoff(n int) time.Duration {
	return min(100*time.Millisecond<<min(n, 5), 2*time.Second)
}

// sleepCtx waits d or until ctx ends, reporting whether the whole wait passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// --- OTLP/gRPC

const traceExportMethod = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

type grpcSpanSender struct {
	conn    *grpc.ClientConn
	headers metadata.MD
}

func newGRPCSpanSender(ep string, headers map[string]string) (*grpcSpanSender, error) {
	target, creds := ep, credentials.TransportCredentials(insecure.NewCredentials())
	if hasScheme(ep) {
		u, err := url.Parse(ep)
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTLP endpoint %q: %w", ep, err)
		}
		target = u.Host
		if u.Scheme == "https" {
			creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
		}
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP gRPC client for %q: %w", ep, err)
	}
	return &grpcSpanSender{conn: conn, headers: metadata.New(headers)}, nil
}

func (s *grpcSpanSender) send(ctx context.Context, req []byte) (int64, error) {
	if len(s.headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, s.headers)
	}
	for n := 0; ; n++ {
		var resp coltracepb.ExportTraceServiceResponse
		err := s.conn.Invoke(ctx, traceExportMethod, encodedRequest(req), &resp, grpc.ForceCodec(otlpCodec{}))
		if err == nil {
			return rejectedSpans(&resp)
		}
		switch status.Code(err) {
		case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.OutOfRange, codes.DataLoss, codes.Canceled:
			if ctx.Err() == nil && sleepCtx(ctx, retryBackoff(n)) {
				continue
			}
		}
		return 0, fmt.Errorf("telemetry: OTLP gRPC trace export: %w", err)
	}
}

func (s *grpcSpanSender) shutdown(context.Context) error { return s.conn.Close() }

// encodedRequest is an ExportTraceServiceRequest already in wire format.
type encodedRequest []byte

// otlpCodec sends an encodedRequest as it is and decodes the reply with protobuf. Its
// name is "proto", so the content type on the wire is the usual application/grpc+proto.
type otlpCodec struct{}

func (otlpCodec) Marshal(v any) ([]byte, error) {
	if r, ok := v.(encodedRequest); ok {
		return r, nil
	}
	return nil, fmt.Errorf("telemetry: otlp codec cannot marshal %T", v)
}

func (otlpCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("telemetry: otlp codec cannot unmarshal into %T", v)
	}
	return proto.Unmarshal(data, m)
}

func (otlpCodec) Name() string { return "proto" }

func rejectedSpans(resp *coltracepb.ExportTraceServiceResponse) (int64, error) {
	ps := resp.GetPartialSuccess()
	if ps == nil || (ps.GetRejectedSpans() == 0 && ps.GetErrorMessage() == "") {
		return 0, nil
	}
	return ps.GetRejectedSpans(), fmt.Errorf("telemetry: collector rejected %d spans: %s", ps.GetRejectedSpans(), ps.GetErrorMessage())
}

// --- OTLP/HTTP (http/protobuf)

type httpSpanSender struct {
	url     string
	headers map[string]string
	client  *http.Client
}

func newHTTPSpanSender(ep string, headers map[string]string) (*httpSpanSender, error) {
	if !hasScheme(ep) {
		ep = "http://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP endpoint %q: %w", ep, err)
	}
	// A bare host (or a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT gives) gets the traces path.
	if !strings.HasSuffix(u.Path, "/v1/traces") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	return &httpSpanSender{url: u.String(), headers: headers, client: &http.Client{Transport: tr}}, nil
}

func (s *httpSpanSender) send(ctx context.Context, req []byte) (int64, error) {
	for n := 0; ; n++ {
		hr, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(req))
		if err != nil {
			return 0, fmt.Errorf("telemetry: OTLP HTTP trace export: %w", err)
		}
		hr.Header.Set("Content-Type", "application/x-protobuf")
		for k, v := range s.headers {
			hr.Header.Set(k, v)
		}
		resp, err := s.client.Do(hr)
		if err != nil {
			if ctx.Err() == nil && sleepCtx(ctx, retryBackoff(n)) {
				continue // connection refused or reset: the collector may be restarting
			}
			return 0, fmt.Errorf("telemetry: OTLP HTTP trace export: %w", err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			var out coltracepb.ExportTraceServiceResponse
			if len(body) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-protobuf") {
				if err := proto.Unmarshal(body, &out); err != nil {
					return 0, nil // delivered; an unreadable reply carries no rejection we could count
				}
			}
			return rejectedSpans(&out)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusBadGateway ||
			resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
			wait := retryBackoff(n)
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
				wait = time.Duration(s) * time.Second
			}
			if sleepCtx(ctx, wait) {
				continue
			}
		}
		return 0, fmt.Errorf("telemetry: OTLP HTTP trace export: %s: %s", resp.Status, bytes.TrimSpace(body[:min(len(body), 200)]))
	}
}

func (s *httpSpanSender) shutdown(context.Context) error {
	s.client.CloseIdleConnections()
	return nil
}
