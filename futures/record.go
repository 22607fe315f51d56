package futures

import (
	"errors"
	"fmt"
	"time"
)

// A future's record, as clients read it and the store keeps it, and the errors the
// Manager answers with.

// Status of a future.
type Status string

// Future states.
const (
	StatusPending Status = "pending"
	StatusRunning Status = "running"
	StatusReady   Status = "ready"
	StatusFailed  Status = "failed"
)

// Category is the Tinker failure category.
type Category string

// Failure categories (the lower-case values the SDK expects).
const (
	CategoryUser    Category = "user"
	CategoryServer  Category = "server"
	CategoryUnknown Category = "unknown"
)

// Queue states reported by try_again replies.
const (
	QueueActive          = "active"
	QueuePausedCapacity  = "paused_capacity"
	QueuePausedRateLimit = "paused_rate_limit"
)

// Result is an operation's encoded result.
type Result struct {
	ContentType string `json:"content_type"`
	Kind        string `json:"kind"`
	Body        []byte `json:"body"`
}

// Failure is a failed operation's error, as the client sees it.
type Failure struct {
	Message  string   `json:"message"`
	Category Category `json:"category"`
}

// Record is a future's persisted state.
type Record struct {
	ID          string    `json:"id"`
	Tenant      string    `json:"tenant"`
	QueueKey    string    `json:"queue_key"`
	OpType      string    `json:"op_type"`
	ModelID     string    `json:"model_id"`
	Pool        string    `json:"pool"`
	SeqID       int64     `json:"seq_id"`
	Ordered     bool      `json:"ordered"`
	Status      Status    `json:"status"`
	QueueState  string    `json:"queue_state,omitempty"`
	PayloadHash string    `json:"payload_hash,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	DoneAt      time.Time `json:"done_at,omitzero"`
	Result      *Result   `json:"result,omitempty"`
	Failure     *Failure  `json:"failure,omitempty"`
	// Abandoned marks a future that a restart failed before it ran. Its seq_id may be
	// submitted again; when a later seq_id of the queue arrives instead, the queue moves
	// past it (the client has seen the failure and will not resend it).
	Abandoned bool `json:"abandoned,omitempty"`
	// Refused marks a future recorded for an operation refused at submission: it settles
	// the seq_id so the queue's next operation runs without waiting for it.
	Refused bool `json:"refused,omitempty"`
	// Owner is the API replica that runs the future ("" for a single server).
	Owner string `json:"owner,omitempty"`
}

// Done reports whether the future has resolved.
func (r *Record) Done() bool { return r.Status == StatusReady || r.Status == StatusFailed }

// Errors of Submit and Wait.
var (
	ErrNotFound     = errors.New("future not found")
	ErrShuttingDown = errors.New("the server is shutting down")
)

// ConflictError: the same (queue, seq_id) was submitted with a different payload.
type ConflictError struct {
	QueueKey   string
	SeqID      int64
	ExistingID string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("seq_id %d of %s was already submitted with a different payload (request %s); each operation needs a new seq_id", e.SeqID, e.QueueKey, e.ExistingID)
}

// SeqError: an ordered task's seq_id is below what the queue expects next.
type SeqError struct {
	QueueKey string
	SeqID    int64
	Next     int64
}

func (e *SeqError) Error() string {
	return fmt.Sprintf("seq_id %d of %s is behind the run: it was executed, refused, or passed over as never sent (the next expected seq_id is %d)", e.SeqID, e.QueueKey, e.Next)
}

// OverLimitError: the tenant has too many unfinished futures.
type OverLimitError struct {
	Limit      int
	RetryAfter time.Duration
}

func (e *OverLimitError) Error() string {
	return fmt.Sprintf("too many queued operations: at most %d unfinished operations per tenant; retry after %s", e.Limit, e.RetryAfter)
}

// CategoryOf returns the category of an operation error: errors that implement
// Category() report their own; everything else is a server error.
func CategoryOf(err error) Category {
	var c interface{ Category() Category }
	if errors.As(err, &c) {
		return c.Category()
	}
	return CategoryServer
}

type userError struct{ err error }

func (u userError) Error() string      { return u.err.Error() }
func (u userError) Unwrap() error      { return u.err }
func (u userError) Category() Category { return CategoryUser }

// UserError marks err as the client's fault.
func UserError(err error) error { return userError{err} }
