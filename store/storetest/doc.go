// Package storetest is the one conformance suite every store.Store implementation runs,
// plus a helper that starts a real redis-server for tests.
package storetest
