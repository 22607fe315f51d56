package redisstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/telemetry"
)

// hook traces every command: span "redis.<COMMAND>" with db.system=redis and
// db.operation, never the arguments; pipelines are one "redis.MULTI" (transactions) or
// "redis.PIPELINE" span. Every command's duration goes to tuft.redis.operation.duration.
type hook struct {
	tracer trace.Tracer
	ins    *telemetry.Instruments
}

func newHook(opts ...telemetry.Option) hook {
	s := telemetry.NewSettings(opts...)
	return hook{tracer: s.Tracer(telemetry.ScopeRedis), ins: s.Instruments}
}

func (hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		op := strings.ToUpper(cmd.Name())
		ctx, sp, t0 := h.start(ctx, op)
		err := next(ctx, cmd)
		h.end(ctx, sp, t0, op, err)
		return err
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		op := "PIPELINE"
		if len(cmds) > 0 && strings.EqualFold(cmds[0].Name(), "multi") {
			op = "MULTI"
		}
		ctx, sp, t0 := h.start(ctx, op)
		if sp.IsRecording() {
			sp.SetAttributes(attribute.Int(telemetry.AttrRedisNumCmd, len(cmds)))
		}
		err := next(ctx, cmds)
		h.end(ctx, sp, t0, op, err)
		return err
	}
}

var clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

func (h hook) start(ctx context.Context, op string) (context.Context, trace.Span, time.Time) {
	ctx, sp := h.tracer.Start(ctx, telemetry.RedisSpan(op), clientSpan...)
	if sp.IsRecording() {
		sp.SetAttributes(attribute.String(telemetry.AttrDBSystem, "redis"), attribute.String(telemetry.AttrDBOperation, op))
	}
	return ctx, sp, time.Now()
}

func (h hook) end(ctx context.Context, sp trace.Span, t0 time.Time, op string, err error) {
	h.ins.RedisOperationDuration.Record(ctx, time.Since(t0).Seconds(), telemetry.RecordAttrs(telemetry.MAttrOperation, op)...)
	if errors.Is(err, redis.Nil) {
		err = nil // a miss is an answer, not a failure
	}
	telemetry.End(sp, err)
}
