package worker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"strings"
	"sync"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/backend/workerpb"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/telemetry"
)

// ServerOptions configures the gRPC server.
type ServerOptions struct {
	// Token is the shared secret callers must present ("authorization: Bearer TOKEN").
	// Empty disables the check, which New refuses unless TLS verifies client certificates.
	Token string
	// TLS, when set, serves TLS; with ClientAuth = RequireAndVerifyClientCert it is mutual
	// TLS and only holders of a certificate from the configured CA get in.
	TLS *tls.Config
	// Telemetry directs the gRPC server spans and metrics (default: the globals).
	Telemetry []telemetry.Option
}

// Service implements workerpb.ExecutorServer over an Executor.
type Service struct {
	workerpb.UnimplementedExecutorServer
	ex       backend.Executor
	instance string
}

// NewService wraps ex. Each Service has a fresh instance id, so callers notice restarts.
func NewService(ex backend.Executor) *Service {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &Service{ex: ex, instance: hex.EncodeToString(b)}
}

// Instance identifies this worker process.
func (s *Service) Instance() string { return s.instance }

// NewServer builds the gRPC server: the executor, the standard health service (for
// Kubernetes probes, open without the token), otelgrpc, and the caller check.
func NewServer(svc *Service, o ServerOptions) (*grpc.Server, *health.Server, error) {
	mutual := o.TLS != nil && o.TLS.ClientAuth == tls.RequireAndVerifyClientCert
	if o.Token == "" && !mutual {
		return nil, nil, errors.New("worker: refusing to serve without a shared token or mutual TLS (set worker.token_file or worker.tls)")
	}
	tel := telemetry.NewSettings(o.Telemetry...)
	opts := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tel.TracerProvider),
			otelgrpc.WithMeterProvider(tel.MeterProvider), otelgrpc.WithPropagators(telemetry.Propagator()))),
		grpc.MaxRecvMsgSize(backend.MaxMessageBytes), grpc.MaxSendMsgSize(backend.MaxMessageBytes),
		grpc.ChainUnaryInterceptor(authInterceptor(o.Token), keysInterceptor),
		grpc.ChainStreamInterceptor(streamAuthInterceptor(o.Token), streamKeysInterceptor),
	}
	if o.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(o.TLS)))
	}
	srv := grpc.NewServer(opts...)
	workerpb.RegisterExecutorServer(srv, svc)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	return srv, hs, nil
}

// authInterceptor admits calls that carry the shared token; health checks are open.
func authInterceptor(token string) grpc.UnaryServerInterceptor {
	want := sha256.Sum256([]byte(token))
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if token == "" || strings.HasPrefix(info.FullMethod, "/grpc.health.v1.Health/") {
			return h(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		var got string
		if v := md.Get("authorization"); len(v) > 0 {
			got, _ = strings.CutPrefix(v[0], "Bearer ")
		}
		// Compare digests: constant time, and the length of the token does not leak.
		sum := sha256.Sum256([]byte(got))
		if got == "" || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			return nil, status.Error(codes.Unauthenticated, "this worker accepts only its tuft server: missing or wrong worker token")
		}
		return h(ctx, req)
	}
}

// streamAuthInterceptor is authInterceptor for streaming RPCs (SampleStream): without it
// a stream would bypass the token check.
func streamAuthInterceptor(token string) grpc.StreamServerInterceptor {
	check := authInterceptor(token)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		_, err := check(ss.Context(), nil, &grpc.UnaryServerInfo{FullMethod: info.FullMethod},
			func(context.Context, any) (any, error) { return nil, nil })
		if err != nil {
			return err
		}
		return h(srv, ss)
	}
}

// streamKeysInterceptor is keysInterceptor for streaming RPCs.
func streamKeysInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &keysStream{ServerStream: ss, ctx: callerContext(ss.Context())})
}

// callerContext restores what the API server sent beside a call: the correlation keys
// (W3C baggage, extracted by otelgrpc), so hf_model.* spans here carry
// tuft.training_run_id and the rest, and the operation's tenant (metadata), by which the
// model's scheduler shares it.
func callerContext(ctx context.Context) context.Context {
	ctx = telemetry.KeysFromBaggage(ctx)
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(backend.TenantMetadata); len(v) > 0 {
			ctx = backend.WithTenant(ctx, v[0])
		}
	}
	return ctx
}

type keysStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (k *keysStream) Context() context.Context { return k.ctx }

// keysInterceptor restores what the caller sent beside the call (callerContext).
func keysInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(callerContext(ctx), req)
}

// toStatus maps executor errors to gRPC codes that backend.Remote maps back.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var ie *engine.InputError
	switch {
	case errors.As(err, &ie):
		return status.Error(codes.InvalidArgument, ie.Msg)
	case errors.Is(err, backend.ErrUnknownModel), errors.Is(err, backend.ErrUnknownAdapter):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// Info implements workerpb.ExecutorServer.
func (s *Service) Info(context.Context, *workerpb.InfoRequest) (*workerpb.InfoReply, error) {
	rep := &workerpb.InfoReply{Instance: s.instance}
	for _, m := range s.ex.Models() {
		mi := &workerpb.ModelInfo{Name: m.Name, Arch: m.Arch, VocabSize: int32(m.VocabSize),
			MaxContextLength: int32(m.MaxContextLength), Signature: m.Signature, Config: workerpb.FromConfig(m.Config),
			KvCacheTokens: int64(m.KVCacheTokens)}
		if m.Text != nil {
			mi.TokenizerJson, mi.ChatTemplate = m.Text.TokenizerJSON, m.Text.TemplateSource
		}
		rep.Models = append(rep.Models, mi)
	}
	return rep, nil
}

// CreateAdapter implements workerpb.ExecutorServer.
func (s *Service) CreateAdapter(ctx context.Context, r *workerpb.CreateAdapterRequest) (*workerpb.Empty, error) {
	a := r.GetAdapter()
	return &workerpb.Empty{}, toStatus(s.ex.CreateAdapter(ctx, a.GetModel(), a.GetLoraId(), workerpb.ToLoraConfig(r.GetConfig())))
}

// RemoveAdapter implements workerpb.ExecutorServer.
func (s *Service) RemoveAdapter(ctx context.Context, a *workerpb.AdapterRef) (*workerpb.Empty, error) {
	return &workerpb.Empty{}, toStatus(s.ex.RemoveAdapter(ctx, a.GetModel(), a.GetLoraId()))
}

// ForwardBackward implements workerpb.ExecutorServer.
func (s *Service) ForwardBackward(ctx context.Context, r *workerpb.ForwardBackwardRequest) (*workerpb.ForwardBackwardReply, error) {
	req, err := workerpb.ToForwardRequest(r)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	res, err := s.ex.ForwardBackward(ctx, r.GetAdapter().GetModel(), r.GetAdapter().GetLoraId(), req)
	if err != nil {
		return nil, toStatus(err)
	}
	return workerpb.FromForwardResult(res), nil
}

// OptimStep implements workerpb.ExecutorServer.
func (s *Service) OptimStep(ctx context.Context, r *workerpb.OptimStepRequest) (*workerpb.OptimStepReply, error) {
	p, err := workerpb.ToStepParams(r)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	m, err := s.ex.OptimStep(ctx, r.GetAdapter().GetModel(), r.GetAdapter().GetLoraId(), p)
	if err != nil {
		return nil, toStatus(err)
	}
	return &workerpb.OptimStepReply{Metrics: m}, nil
}

// SaveState implements workerpb.ExecutorServer.
func (s *Service) SaveState(ctx context.Context, r *workerpb.StateRequest) (*workerpb.Empty, error) {
	return &workerpb.Empty{}, toStatus(s.ex.SaveState(ctx, r.GetAdapter().GetModel(), r.GetAdapter().GetLoraId(), r.GetDir(), r.GetOptimizer()))
}

// LoadState implements workerpb.ExecutorServer.
func (s *Service) LoadState(ctx context.Context, r *workerpb.StateRequest) (*workerpb.Empty, error) {
	return &workerpb.Empty{}, toStatus(s.ex.LoadState(ctx, r.GetAdapter().GetModel(), r.GetAdapter().GetLoraId(), r.GetDir(), r.GetOptimizer(),
		workerpb.ToOptimizerConfig(r.GetOptimizerConfig())))
}

// Sample implements workerpb.ExecutorServer.
func (s *Service) Sample(ctx context.Context, r *workerpb.SampleRequest) (*workerpb.SampleReply, error) {
	res, err := s.ex.Sample(ctx, r.GetAdapter().GetModel(), r.GetAdapter().GetLoraId(), workerpb.ToSampleRequest(r))
	if err != nil {
		return nil, toStatus(err)
	}
	return workerpb.FromSampleResult(res), nil
}

// SampleStream implements workerpb.ExecutorServer: each token goes out as it is drawn,
// then the result.
func (s *Service) SampleStream(r *workerpb.SampleStreamRequest, out grpc.ServerStreamingServer[workerpb.SampleEvent]) error {
	sx, ok := s.ex.(backend.Streamer)
	if !ok {
		return status.Error(codes.Unimplemented, "this worker's executor cannot stream tokens")
	}
	ctx := out.Context()
	req := r.GetRequest()
	// A send that fails (the caller went away) ends the sample: the engine stops at its
	// next step when ctx ends, and the first send error is reported.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	res, err := sx.SampleStream(ctx, req.GetAdapter().GetModel(), req.GetAdapter().GetLoraId(), workerpb.ToSampleRequest(req), backend.Stream{
		TopLogprobs: int(r.GetTopLogprobs()),
		OnToken: func(ev engine.TokenEvent) {
			mu.Lock()
			defer mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			if err := out.Send(&workerpb.SampleEvent{Event: &workerpb.SampleEvent_Token{Token: workerpb.FromTokenEvent(ev)}}); err != nil {
				cancel(err)
			}
		}})
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return status.Error(codes.Unavailable, "stream to the caller broke: "+cause.Error())
	}
	if err != nil {
		return toStatus(err)
	}
	return out.Send(&workerpb.SampleEvent{Event: &workerpb.SampleEvent_Result{Result: workerpb.FromSampleResult(res)}})
}
