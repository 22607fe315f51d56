package anthropic

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/service"
)

// apiError is an error in Anthropic's shape: {"type":"error","error":{"type","message"}}.
type apiError struct {
	Status     int
	Type       string
	Message    string
	RetryAfter time.Duration
}

func (e *apiError) Error() string { return e.Message }

func invalid(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: fmt.Sprintf(format, args...)}
}

type errorBody struct {
	Type  string      `json:"type"`
	Error errorObject `json:"error"`
}

type errorObject struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

func (e *apiError) body() errorBody {
	return errorBody{Type: "error", Error: errorObject{Type: e.Type, Message: e.Message}}
}

func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var be *textgen.BodyError
	if errors.As(err, &be) {
		if be.Status == http.StatusRequestEntityTooLarge {
			return &apiError{Status: be.Status, Type: "request_too_large", Message: be.Msg}
		}
		return &apiError{Status: be.Status, Type: "invalid_request_error", Message: be.Msg}
	}
	var se *service.Error
	if !errors.As(err, &se) {
		se = &service.Error{Kind: service.KindOf(err), Msg: err.Error()}
	}
	switch se.Kind {
	case service.KindInvalid, service.KindConflict:
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: se.Msg}
	case service.KindNotFound:
		return &apiError{Status: http.StatusNotFound, Type: "not_found_error", Message: se.Msg}
	case service.KindTooMany:
		return &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Message: se.Msg, RetryAfter: se.RetryAfter}
	case service.KindUnauthorized:
		return &apiError{Status: http.StatusUnauthorized, Type: "authentication_error", Message: se.Msg}
	case service.KindTooLarge:
		return &apiError{Status: http.StatusRequestEntityTooLarge, Type: "request_too_large", Message: se.Msg}
	case service.KindUnavailable:
		return &apiError{Status: 529, Type: "overloaded_error", Message: se.Msg}
	}
	return &apiError{Status: http.StatusInternalServerError, Type: "api_error", Message: se.Msg}
}

// WriteError answers with err in Anthropic's error shape: the api package's layers
// (authentication, admission, body limits) answer requests under Prefix with it.
func WriteError(w http.ResponseWriter, err error) { writeError(w, err) }

func writeError(w http.ResponseWriter, err error) {
	e := toAPIError(err)
	if e.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(max(int(e.RetryAfter.Round(time.Second)/time.Second), 1)))
	}
	if e.Status >= 400 && e.Status < 500 && e.Status != http.StatusTooManyRequests {
		// The anthropic client retries 409 and 408; a user error does not heal by waiting.
		w.Header().Set("X-Should-Retry", "false")
	}
	textgen.WriteJSON(w, encodingFailed, e.Status, e.body())
}

// encodingFailed is the error answered for a reply that does not encode (textgen.WriteJSON).
var encodingFailed = []byte(`{"type":"error","error":{"type":"api_error","message":"response encoding failed"}}`)

// Fields of a messages request (Anthropic answers unknown ones with a 400 too).
// temperature, top_p and top_k are parsed although recent anthropic clients no longer
// offer them as arguments (send them through extra_body).
