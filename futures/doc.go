// Package futures runs the control plane's asynchronous operations: every training and
// sampling call becomes a future with an unguessable request id. Operations of one
// training run execute strictly in seq_id order (out-of-order arrivals wait); a runnable
// model operation (Task.Start) is handed to the executor at once, without a goroutine
// waiting for it, and tenant fairness for model work is the backend's token scheduler's
// alone; blocking operations (Task.Run) share a fixed set of workers round-robin across
// tenants; results are persisted and stay retrievable for a TTL; a restart resolves every
// future left in flight.
//
// The Manager (futures.go) is the only type; its files follow its concerns:
//
//   - record.go: Record, the state clients read and the store keeps, and the errors.
//   - id.go: request ids, which sort by and carry their creation time.
//   - submit.go: Submit and Refuse: checks under the lock, then persist, then schedule.
//   - dedupe.go: resubmissions of a (queue, seq_id) get the first request id.
//   - sched.go: the operation scheduler (opScheduler), plain data: ordered queues, the models' pools and the blocking pool, tenant limits.
//   - exec.go: the dispatcher, the blocking and completion workers, Completion, the execution span and the futures metrics.
//   - persist.go: records in the store, Recover after a restart, lost acceptances.
//   - janitor.go: the periodic sweeps (seq_id gaps, dedupe window, memory expiry).
package futures
