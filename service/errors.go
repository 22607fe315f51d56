package service

import (
	"errors"
	"fmt"
	"time"

	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/futures"
)

// Kind classifies a service error; the HTTP layer maps each kind to one status code.
type Kind int

const (
	KindInternal     Kind = iota // 500, category server
	KindInvalid                  // 400, category user
	KindNotFound                 // 404, category user (also: another tenant's id)
	KindConflict                 // 409, category user
	KindTooMany                  // 429, with RetryAfter
	KindUnavailable              // 503, the server is shutting down or a dependency is down
	KindUnauthorized             // 401
	KindGone                     // 410, category user: the session was finished
	KindForbidden                // 403, category user: the caller may not do this (e.g. delete a configured key)
	KindTooLarge                 // 413, category user: one request's payload is over a limit (quota.go)
)

// Error is an error a client sees: a kind and a message naming the problem.
type Error struct {
	Kind       Kind
	Msg        string
	RetryAfter time.Duration
	Err        error
	// Limit is the config key of the per-tenant quota that refused the request ("" for
	// other errors); the HTTP layer puts it on the request's span (telemetry.AttrQuotaLimit).
	Limit string
}

func (e *Error) Error() string { return e.Msg }

func (e *Error) Unwrap() error { return e.Err }

// Category is the Tinker failure category of the error (futures use it).
func (e *Error) Category() futures.Category {
	switch e.Kind {
	case KindInvalid, KindNotFound, KindConflict, KindUnauthorized, KindGone, KindForbidden, KindTooLarge:
		return futures.Category("user")
	}
	return futures.Category("server")
}

func invalidf(format string, args ...any) error {
	return &Error{Kind: KindInvalid, Msg: fmt.Sprintf(format, args...)}
}

func notFoundf(format string, args ...any) error {
	return &Error{Kind: KindNotFound, Msg: fmt.Sprintf(format, args...)}
}

func gonef(format string, args ...any) error {
	return &Error{Kind: KindGone, Msg: fmt.Sprintf(format, args...)}
}

func conflictf(format string, args ...any) error {
	return &Error{Kind: KindConflict, Msg: fmt.Sprintf(format, args...)}
}

// classify turns lower-layer errors into service errors with a client-facing message.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return err
	}
	var ie *engine.InputError
	if errors.As(err, &ie) {
		return &Error{Kind: KindInvalid, Msg: ie.Msg, Err: err}
	}
	return &Error{Kind: KindInternal, Msg: err.Error(), Err: err}
}

// KindOf returns the kind of err (KindInternal for foreign errors).
func KindOf(err error) Kind {
	var se *Error
	if errors.As(err, &se) {
		return se.Kind
	}
	var ie *engine.InputError
	if errors.As(err, &ie) {
		return KindInvalid
	}
	return KindInternal
}
