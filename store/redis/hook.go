package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tuft-go/tuft/telemetry"
)

// hook traces every command: span "redis.<COMMAND>" with db.system=redis and
// db.operation, never the arguments; pipelines are one "redis.MULTI" (transactions) or
// "redis.PIPELINE" span.
type hook struct{}

func (hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		op := strings.ToUpper(cmd.Name())
		ctx, sp, t0 := start(ctx, op)
		err := next(ctx, cmd)
		end(ctx, sp, t0, op, err)
		return err
	}
}

func (hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		op := "PIPELINE"
		if len(cmds) > 0 && strings.EqualFold(cmds[0].Name(), "multi") {
			op = "MULTI"
		}
		ctx, sp, t0 := start(ctx, op)
		if sp.IsRecording() {
			sp.SetAttributes(attribute.Int("db.redis.num_cmd", len(cmds)))
		}
		err := next(ctx, cmds)
		end(ctx, sp, t0, op, err)
		return err
	}
}

func start(ctx context.Context, op string) (context.Context, trace.Span, time.Time) {
	ctx, sp := telemetry.Tracer(telemetry.ScopeRedis).Start(ctx, "redis."+op, trace.WithSpanKind(trace.SpanKindClient))
	if sp.IsRecording() {
		sp.SetAttributes(attribute.String(telemetry.AttrDBSystem, "redis"), attribute.String(telemetry.AttrDBOperation, op))
	}
	return ctx, sp, time.Now()
}

func end(ctx context.Context, sp trace.Span, t0 time.Time, op string, err error) {
	telemetry.Metrics().RedisOperationDuration.Record(ctx, time.Since(t0).Seconds(),
		telemetry.Attrs(telemetry.MAttrOperation, op))
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	var ne net.Error
	_ = errors.As(err, &ne)
	telemetry.End(sp, err)
}
