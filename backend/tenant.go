package backend

import (
	"context"

	"github.com/tuft-go/tuft/config"

	"github.com/tuft-go/tuft/backend/sched"
)

// TenantMetadata is the gRPC metadata key that carries an operation's tenant to a
// worker, whose scheduler shares the model between tenants by it.
const TenantMetadata = "x-tuft-tenant"

// WithTenant returns ctx carrying the tenant an operation runs for (sched.WithTenant):
// each model's scheduler shares compute and KV-cache memory fairly between tenants.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return sched.WithTenant(ctx, tenant)
}

// TenantFrom is the tenant WithTenant put in ctx ("" if none).
func TenantFrom(ctx context.Context) string { return sched.TenantFrom(ctx) }

// SchedConfig configures the scheduler of each hosted model (sched.Config).
type SchedConfig = sched.Config

// SchedStats are a model scheduler's counters (sched.Stats).
type SchedStats = sched.Stats

// DefaultSchedConfig is the configuration of config.Default() (engine.scheduler).
func DefaultSchedConfig() SchedConfig { return sched.DefaultConfig() }

// SchedConfigFrom is the scheduler configuration of engine.scheduler.
func SchedConfigFrom(c config.Scheduler) SchedConfig { return sched.ConfigFrom(c) }

// ErrClosed is returned for work a closed executor did not run.
var ErrClosed = sched.ErrClosed
