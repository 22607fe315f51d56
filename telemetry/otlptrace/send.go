package otlptrace

import (
	"bytes"
	gz "compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
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

// newSpanSender makes the sender of protocol for endpoint ep. An endpoint without a
// scheme, or with http://, is plain text; https:// uses TLS with the system's roots or
// the OTEL_EXPORTER_OTLP_* certificate files.
//
// The standard exporter variables keep working for traces as they do for the metric and
// log exporters: OTEL_EXPORTER_OTLP_[TRACES_]HEADERS (config headers win),
// _COMPRESSION (gzip), _CERTIFICATE, _CLIENT_CERTIFICATE and _CLIENT_KEY.
func newSpanSender(protocol string, headers map[string]string, ep string) (spanSender, error) {
	o, err := senderOptionsFromEnv(headers)
	if err != nil {
		return nil, err
	}
	if protocol == ProtocolHTTP {
		return newHTTPSpanSender(ep, o)
	}
	return newGRPCSpanSender(ep, o)
}

// senderOptions are the transport settings beside the endpoint.
type senderOptions struct {
	headers map[string]string
	gzip    bool
	tls     *tls.Config // for https endpoints
}

// otlpEnv returns the traces-specific variable OTEL_EXPORTER_OTLP_TRACES_<name>, else
// the generic OTEL_EXPORTER_OTLP_<name>.
func otlpEnv(name string) (value, key string) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_" + name, "OTEL_EXPORTER_OTLP_" + name} {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			return v, k
		}
	}
	return "", ""
}

func senderOptionsFromEnv(cfgHeaders map[string]string) (senderOptions, error) {
	o := senderOptions{headers: map[string]string{}}
	// Generic first, then traces-specific, then the config file: the most specific wins.
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		v := os.Getenv(k)
		if strings.TrimSpace(v) == "" {
			continue
		}
		for _, pair := range strings.Split(v, ",") {
			name, val, ok := strings.Cut(pair, "=")
			name = strings.TrimSpace(name)
			if !ok || name == "" {
				return o, fmt.Errorf("telemetry: %s: %q is not key=value", k, strings.TrimSpace(pair))
			}
			if dec, err := url.QueryUnescape(strings.TrimSpace(val)); err == nil {
				val = dec
			}
			o.headers[name] = val
		}
	}
	for k, v := range cfgHeaders {
		o.headers[k] = v
	}
	switch v, k := otlpEnv("COMPRESSION"); v {
	case "", "none":
	case "gzip":
		o.gzip = true
	default:
		return o, fmt.Errorf("telemetry: %s: %q is not gzip or none", k, v)
	}
	o.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	if f, k := otlpEnv("CERTIFICATE"); f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return o, fmt.Errorf("telemetry: %s: %w", k, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return o, fmt.Errorf("telemetry: %s: no PEM certificate in %s", k, f)
		}
		o.tls.RootCAs = pool
	}
	cert, ck := otlpEnv("CLIENT_CERTIFICATE")
	key, kk := otlpEnv("CLIENT_KEY")
	if (cert == "") != (key == "") {
		return o, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY go together (have %s%s)", ck, kk)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return o, fmt.Errorf("telemetry: %s / %s: %w", ck, kk, err)
		}
		o.tls.Certificates = []tls.Certificate{pair}
	}
	return o, nil
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
	opts    []grpc.CallOption
}

func newGRPCSpanSender(ep string, o senderOptions) (*grpcSpanSender, error) {
	target, creds := ep, credentials.TransportCredentials(insecure.NewCredentials())
	if hasScheme(ep) {
		u, err := url.Parse(ep)
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTLP endpoint %q: %w", ep, err)
		}
		target = u.Host
		if u.Scheme == "https" {
			creds = credentials.NewTLS(o.tls)
		}
	}
	// grpc-go's reconnect backoff grows to two minutes; a collector that comes back should
	// get spans again within seconds.
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 5 * time.Second,
			Backoff: backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second}}))
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP gRPC client for %q: %w", ep, err)
	}
	s := &grpcSpanSender{conn: conn, headers: metadata.New(o.headers), opts: []grpc.CallOption{grpc.ForceCodec(otlpCodec{})}}
	if o.gzip {
		s.opts = append(s.opts, grpc.UseCompressor(gzip.Name))
	}
	return s, nil
}

func (s *grpcSpanSender) send(ctx context.Context, req []byte) (int64, error) {
	if len(s.headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, s.headers)
	}
	for n := 0; ; n++ {
		var resp coltracepb.ExportTraceServiceResponse
		err := s.conn.Invoke(ctx, traceExportMethod, encodedRequest(req), &resp, s.opts...)
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

func hasScheme(ep string) bool { return strings.Contains(ep, "://") }

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
	gzip    bool
	client  *http.Client
}

func newHTTPSpanSender(ep string, o senderOptions) (*httpSpanSender, error) {
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
	tr.TLSClientConfig = o.tls
	return &httpSpanSender{url: u.String(), headers: o.headers, gzip: o.gzip, client: &http.Client{Transport: tr}}, nil
}

func (s *httpSpanSender) send(ctx context.Context, req []byte) (int64, error) {
	if s.gzip {
		var zb bytes.Buffer
		zw := gz.NewWriter(&zb)
		zw.Write(req)
		zw.Close()
		req = zb.Bytes()
	}
	for n := 0; ; n++ {
		hr, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(req))
		if err != nil {
			return 0, fmt.Errorf("telemetry: OTLP HTTP trace export: %w", err)
		}
		hr.Header.Set("Content-Type", "application/x-protobuf")
		if s.gzip {
			hr.Header.Set("Content-Encoding", "gzip")
		}
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
		case resp.StatusCode/100 == 2:
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
