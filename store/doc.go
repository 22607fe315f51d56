// Package store persists the control plane's records: sessions, training runs, sampling
// sessions, checkpoint metadata, futures and their results. One interface, three
// implementations: embedded (crash-safe single file, the default), Redis (shared by
// several API replicas) and memory (tests, ephemeral deployments).
package store
