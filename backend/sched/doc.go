// Package sched is each hosted model's scheduler: one goroutine (the loop) that owns the
// model and runs, one at a time, decode steps (continuous batching of every sample
// request), training packs (forward and forward_backward datums of many adapters and
// tenants) and exclusive jobs (every other device operation), sharing them fairly between
// tenants and giving each unit's device error to that unit's work only.
//
// Files by concern: kv.go (the KV manager: block pool, admission, reclaim, preemption),
// prefix.go (the prefix cache), policy.go (deficit round robin across tenants over an
// allocation oracle), loop.go (the goroutine: choosing between kinds, waits, ended work,
// close), sample.go, train.go and job.go (the units). docs/scheduling.md states the
// bounds. backend.Local is its only user; tests/layers keeps DecodeStep and TrainStep
// callers here.
package sched
