// Package memory is an in-process store.Store: a map with TTLs. Nothing survives the
// process; it serves tests and deployments that want no persistence.
package memory
