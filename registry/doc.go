// Package registry keeps the worker registrations in the shared store: a `tuft worker`
// publishes its backend.Registration there (renewed, with a TTL, withdrawn on a clean
// stop), and the API replicas list them for their backend.Directory. It is the one place
// that knows the records' keys and encoding, beside the controllers' own records in
// package service.
package registry
