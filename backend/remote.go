package backend

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tuft-go/tuft/backend/workerpb"
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/telemetry"
)

// MaxMessageBytes bounds one gRPC message between the API and a worker (a forward_backward
// of many long datums, or its per-token outputs).
const MaxMessageBytes = 1 << 30

// RemoteOptions configures a connection to a `tuft worker`.
type RemoteOptions struct {
	// Token is the shared secret the worker requires ("" with mutual TLS only).
	Token string
	// TLS, when set, is the client side of (mutual) TLS; nil is plaintext.
	TLS *tls.Config
	// CallTimeout bounds every operation (a slow or stuck worker fails the operation
	// instead of holding it forever): workers.call_timeout_seconds (RemoteOptionsFrom).
	CallTimeout time.Duration
	// ConnectTimeout bounds the first Info call. Default 10 s (not a config key).
	ConnectTimeout time.Duration
	// Telemetry directs the gRPC client spans and metrics (default: the globals).
	Telemetry []telemetry.Option
}

// Remote is an Executor served by a `tuft worker` over gRPC. Trace context crosses the
// connection (otelgrpc), so the worker's spans join the caller's trace.
type Remote struct {
	addr     string
	conn     *grpc.ClientConn
	cl       workerpb.ExecutorClient
	o        RemoteOptions
	instance string
	infos    []ModelInfo
}

type tokenCreds struct {
	token  string
	secure bool
}

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + t.token}, nil
}

func (t tokenCreds) RequireTransportSecurity() bool { return t.secure }

// RemoteOptionsFrom is the connection options of the configuration's workers section
// (the caller adds the token, TLS and telemetry).
func RemoteOptionsFrom(w config.Workers) RemoteOptions {
	return RemoteOptions{CallTimeout: w.CallTimeoutSeconds.Duration()}
}

// DialRemote connects to the worker at addr and asks it which models it hosts.
func DialRemote(ctx context.Context, addr string, o RemoteOptions) (*Remote, error) {
	config.MustPositive("workers.call_timeout_seconds", o.CallTimeout)
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	tel := telemetry.NewSettings(o.Telemetry...)
	opts := []grpc.DialOption{
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tel.TracerProvider),
			otelgrpc.WithMeterProvider(tel.MeterProvider), otelgrpc.WithPropagators(telemetry.Propagator()))),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
	}
	if o.TLS != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(o.TLS)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if o.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds{token: o.Token, secure: o.TLS != nil}))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", addr, err)
	}
	r := &Remote{addr: addr, conn: conn, cl: workerpb.NewExecutorClient(conn), o: o}
	if err := r.refresh(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return r, nil
}

// refresh reads the worker's instance id and models.
func (r *Remote) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.o.ConnectTimeout)
	defer cancel()
	info, err := r.cl.Info(ctx, &workerpb.InfoRequest{})
	if err != nil {
		return r.fail("info", err)
	}
	r.instance = info.GetInstance()
	r.infos = r.infos[:0]
	for _, m := range info.GetModels() {
		mi := ModelInfo{Name: m.GetName(), Arch: m.GetArch(), VocabSize: int(m.GetVocabSize()),
			MaxContextLength: int(m.GetMaxContextLength()), Signature: m.GetSignature(), Config: workerpb.ToConfig(m.GetConfig()),
			KVCacheTokens: int(m.GetKvCacheTokens())}
		if tj := m.GetTokenizerJson(); len(tj) > 0 {
			if mi.Text, err = TextFromSource(tj, m.GetChatTemplate(), mi.Config); err != nil {
				return fmt.Errorf("worker %s: model %s: %w", r.addr, mi.Name, err)
			}
		}
		r.infos = append(r.infos, mi)
	}
	return nil
}

// Ping asks the worker for its instance id (a cheap liveness check on the open
// connection).
func (r *Remote) Ping(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.o.ConnectTimeout)
	defer cancel()
	info, err := r.cl.Info(ctx, &workerpb.InfoRequest{})
	if err != nil {
		return "", r.fail("ping", err)
	}
	return info.GetInstance(), nil
}

// Addr is the worker's address.
func (r *Remote) Addr() string { return r.addr }

// Instance identifies the worker process seen at connect time.
func (r *Remote) Instance() string { return r.instance }

// Models implements Executor.
func (r *Remote) Models() []ModelInfo { return append([]ModelInfo(nil), r.infos...) }

// Close implements Executor.
func (r *Remote) Close() error { return r.conn.Close() }

// call bounds one operation and sends the correlation keys along (W3C baggage), so the
// worker's spans and logs carry the same tuft.* keys as the caller's.
func (r *Remote) call(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx = telemetry.KeysToBaggage(ctx)
	if t := TenantFrom(ctx); t != "" {
		// The worker's scheduler shares the model between tenants.
		ctx = metadata.AppendToOutgoingContext(ctx, TenantMetadata, t)
	}
	return context.WithTimeout(ctx, r.o.CallTimeout)
}

func ref(model, lora string) *workerpb.AdapterRef {
	return &workerpb.AdapterRef{Model: model, LoraId: lora}
}

// ErrWorkerUnavailable marks an operation a worker could not run: it is down, unreachable
// or restarting. The operation may be retried once the adapter is restored.
var ErrWorkerUnavailable = errors.New("worker unavailable")

// fail turns a gRPC status back into the error the in-process executor would have
// returned, so callers classify both alike.
func (r *Remote) fail(op string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("worker %s: %s: %w", r.addr, op, err)
	}
	msg := st.Message()
	switch st.Code() {
	case codes.InvalidArgument:
		return &engine.InputError{Msg: msg}
	case codes.NotFound:
		if strings.HasPrefix(msg, ErrUnknownModel.Error()) {
			return fmt.Errorf("worker %s: %w", r.addr, &wrapped{ErrUnknownModel, msg})
		}
		return fmt.Errorf("worker %s: %w", r.addr, &wrapped{ErrUnknownAdapter, msg})
	case codes.DeadlineExceeded:
		return fmt.Errorf("worker %s: %s did not finish within the deadline: %w", r.addr, op, context.DeadlineExceeded)
	case codes.Canceled:
		return fmt.Errorf("worker %s: %s: %w", r.addr, op, context.Canceled)
	case codes.Unavailable, codes.Aborted:
		return fmt.Errorf("worker %s: %s: %w: %s", r.addr, op, ErrWorkerUnavailable, msg)
	case codes.Unauthenticated, codes.PermissionDenied:
		return fmt.Errorf("worker %s refused this server (check workers.token_file / TLS): %s", r.addr, msg)
	default:
		return fmt.Errorf("worker %s: %s failed: %s", r.addr, op, msg)
	}
}

// wrapped keeps the worker's message while matching a sentinel with errors.Is.
type wrapped struct {
	sentinel error
	msg      string
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.sentinel }

// CreateAdapter implements Executor.
func (r *Remote) CreateAdapter(ctx context.Context, model, lora string, cfg engine.LoraConfig) error {
	ctx, cancel := r.call(ctx)
	defer cancel()
	if _, err := r.cl.CreateAdapter(ctx, &workerpb.CreateAdapterRequest{Adapter: ref(model, lora), Config: workerpb.FromLoraConfig(cfg)}); err != nil {
		return r.fail("create adapter", err)
	}
	return nil
}

// RemoveAdapter implements Executor.
func (r *Remote) RemoveAdapter(ctx context.Context, model, lora string) error {
	ctx, cancel := r.call(ctx)
	defer cancel()
	if _, err := r.cl.RemoveAdapter(ctx, ref(model, lora)); err != nil {
		return r.fail("remove adapter", err)
	}
	return nil
}

// ForwardBackward implements Executor.
func (r *Remote) ForwardBackward(ctx context.Context, model, lora string, req engine.ForwardRequest) (engine.ForwardResult, error) {
	ctx, cancel := r.call(ctx)
	defer cancel()
	rep, err := r.cl.ForwardBackward(ctx, workerpb.FromForwardRequest(ref(model, lora), req))
	if err != nil {
		return engine.ForwardResult{}, r.fail("forward_backward", err)
	}
	return workerpb.ToForwardResult(rep)
}

// OptimStep implements Executor.
func (r *Remote) OptimStep(ctx context.Context, model, lora string, p engine.StepParams) (map[string]float64, error) {
	ctx, cancel := r.call(ctx)
	defer cancel()
	rep, err := r.cl.OptimStep(ctx, workerpb.FromStepParams(ref(model, lora), p))
	if err != nil {
		return nil, r.fail("optim_step", err)
	}
	m := rep.GetMetrics()
	if m == nil {
		m = map[string]float64{}
	}
	return m, nil
}

// SaveState implements Executor; dir is on the checkpoint volume the worker shares.
func (r *Remote) SaveState(ctx context.Context, model, lora, dir string, optimizer bool) error {
	ctx, cancel := r.call(ctx)
	defer cancel()
	if _, err := r.cl.SaveState(ctx, &workerpb.StateRequest{Adapter: ref(model, lora), Dir: dir, Optimizer: optimizer}); err != nil {
		return r.fail("save state", err)
	}
	return nil
}

// LoadState implements Executor; dir is on the checkpoint volume the worker shares.
func (r *Remote) LoadState(ctx context.Context, model, lora, dir string, optimizer bool, want engine.OptimizerConfig) error {
	ctx, cancel := r.call(ctx)
	defer cancel()
	req := &workerpb.StateRequest{Adapter: ref(model, lora), Dir: dir, Optimizer: optimizer, OptimizerConfig: workerpb.FromOptimizerConfig(want)}
	if _, err := r.cl.LoadState(ctx, req); err != nil {
		return r.fail("load state", err)
	}
	return nil
}

// Sample implements Executor.
func (r *Remote) Sample(ctx context.Context, model, lora string, req engine.SampleRequest) (engine.SampleResult, error) {
	ctx, cancel := r.call(ctx)
	defer cancel()
	rep, err := r.cl.Sample(ctx, workerpb.FromSampleRequest(ref(model, lora), req))
	if err != nil {
		return engine.SampleResult{}, r.fail("sample", err)
	}
	return workerpb.ToSampleResult(rep), nil
}

// ForwardBackwardAsync implements Executor. A gRPC call holds a goroutine for as long as
// it runs (the client's stub blocks), so each call gets one here; Local's Async forms
// need none.
func (r *Remote) ForwardBackwardAsync(ctx context.Context, model, lora string, req engine.ForwardRequest, done func(engine.ForwardResult, error)) {
	goAsync(ctx, func(ctx context.Context) (engine.ForwardResult, error) {
		return r.ForwardBackward(ctx, model, lora, req)
	}, done)
}

// OptimStepAsync implements Executor: a goroutine per call, as ForwardBackwardAsync.
func (r *Remote) OptimStepAsync(ctx context.Context, model, lora string, p engine.StepParams, done func(map[string]float64, error)) {
	goAsync(ctx, func(ctx context.Context) (map[string]float64, error) { return r.OptimStep(ctx, model, lora, p) }, done)
}

// SampleAsync implements Executor: a goroutine per call, as ForwardBackwardAsync.
func (r *Remote) SampleAsync(ctx context.Context, model, lora string, req engine.SampleRequest, done func(engine.SampleResult, error)) {
	goAsync(ctx, func(ctx context.Context) (engine.SampleResult, error) { return r.Sample(ctx, model, lora, req) }, done)
}

// SampleStream implements Streamer over the worker's SampleStream RPC: tokens arrive as
// the worker draws them.
func (r *Remote) SampleStream(ctx context.Context, model, lora string, req engine.SampleRequest, st Stream) (engine.SampleResult, error) {
	ctx, cancel := r.call(ctx)
	defer cancel()
	stream, err := r.cl.SampleStream(ctx, &workerpb.SampleStreamRequest{Request: workerpb.FromSampleRequest(ref(model, lora), req),
		TopLogprobs: int32(st.TopLogprobs)})
	if err != nil {
		return engine.SampleResult{}, r.fail("sample", err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return engine.SampleResult{}, fmt.Errorf("worker %s: the sample stream ended without a result", r.addr)
			}
			return engine.SampleResult{}, r.fail("sample", err)
		}
		switch e := ev.GetEvent().(type) {
		case *workerpb.SampleEvent_Token:
			if st.OnToken != nil {
				st.OnToken(workerpb.ToTokenEvent(e.Token))
			}
		case *workerpb.SampleEvent_Result:
			return workerpb.ToSampleResult(e.Result), nil
		}
	}
}
