package backend

import "context"

type tenantKey struct{}

// TenantMetadata is the gRPC metadata key that carries an operation's tenant to a
// worker, whose scheduler shares the model between tenants by it.
const TenantMetadata = "x-tuft-tenant"

// WithTenant returns ctx carrying the tenant an operation runs for. Each model's
// scheduler shares compute and KV-cache memory fairly between tenants; operations
// without a tenant share one anonymous tenant.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFrom is the tenant WithTenant put in ctx ("" if none).
func TenantFrom(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}
