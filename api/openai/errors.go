package openai

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tuft-go/tuft/api/textgen"
	"github.com/tuft-go/tuft/service"
)

// apiError is an error in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	Status     int
	Message    string
	Type       string
	Param      string
	Code       string
	RetryAfter time.Duration
}

func (e *apiError) Error() string { return e.Message }

// invalid is a 400 invalid_request_error naming param.
func invalid(param, code, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

// unsupported is the 400 for a parameter or value we do not implement.
func unsupported(param, format string, args ...any) *apiError {
	return invalid(param, "unsupported_parameter", format, args...)
}

type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() errorBody {
	o := errorObject{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		o.Param = &e.Param
	}
	if e.Code != "" {
		o.Code = &e.Code
	}
	return errorBody{Error: o}
}

// contextExceeded gives a prompt (param) found too long for the context while it was
// rendered or tokenized OpenAI's code for it; other errors pass unchanged.
func contextExceeded(param string, err error) error {
	if errors.Is(err, service.ErrContextLength) {
		return invalid(param, "context_length_exceeded", "%s", err.Error())
	}
	return err
}

// toAPIError maps service and reading errors to OpenAI errors.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var be *textgen.BodyError
	if errors.As(err, &be) {
		e := &apiError{Status: be.Status, Type: "invalid_request_error", Message: be.Msg}
		switch be.Status {
		case http.StatusRequestEntityTooLarge:
			e.Code = "request_too_large"
		case http.StatusUnsupportedMediaType:
			e.Code = "unsupported_content_encoding"
		}
		return e
	}
	var se *service.Error
	if !errors.As(err, &se) {
		se = &service.Error{Kind: service.KindOf(err), Msg: err.Error()}
	}
	switch se.Kind {
	case service.KindInvalid:
		return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: se.Msg}
	case service.KindNotFound:
		return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found", Message: se.Msg}
	case service.KindConflict:
		return &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Message: se.Msg}
	case service.KindTooMany:
		return &apiError{Status: http.StatusTooManyRequests, Type: "requests", Code: "rate_limit_exceeded", Message: se.Msg, RetryAfter: se.RetryAfter}
	case service.KindUnauthorized:
		return &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key", Message: se.Msg}
	case service.KindTooLarge:
		return &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large", Message: se.Msg}
	case service.KindUnavailable:
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Message: se.Msg}
	}
	return &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: se.Msg}
}

// WriteError answers with err as an OpenAI error object: the api package's layers
// (authentication, admission, body limits) answer requests under Prefix with it.
func WriteError(w http.ResponseWriter, err error) { writeError(w, err) }

// writeError answers with err as an OpenAI error object.
func writeError(w http.ResponseWriter, err error) {
	e := toAPIError(err)
	if e.Status == http.StatusTooManyRequests {
		secs := int(e.RetryAfter.Round(time.Second) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	}
	if e.Status >= 400 && e.Status < 500 && e.Status != http.StatusTooManyRequests {
		// The openai client retries 409 (and 408); a user error does not heal by waiting.
		w.Header().Set("X-Should-Retry", "false")
	}
	textgen.WriteJSON(w, encodingFailed, e.Status, e.body())
}

// encodingFailed is the error answered for a reply that does not encode (textgen.WriteJSON).
var encodingFailed = []byte(`{"error":{"message":"response encoding failed","type":"server_error","param":null,"code":null}}`)
