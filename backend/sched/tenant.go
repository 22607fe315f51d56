package sched

import "context"

type tenantKey struct{}

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
