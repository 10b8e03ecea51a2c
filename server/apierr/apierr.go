// Package apierr is the wheelq server's one table of error codes: each
// code is a stable machine-readable string, with the HTTP status the
// HTTP API answers it with and the prefix the RESP front end will. Both
// front ends and the OpenAPI document take their codes from Codes; a test
// checks they agree.
package apierr

import (
	"fmt"
	"net/http"
	"strings"
)

// Code is an error code.
type Code string

// The codes.
const (
	Invalid         Code = "invalid"
	TooLarge        Code = "too_large"
	Unauthorized    Code = "unauthorized"
	Forbidden       Code = "forbidden"
	NotFound        Code = "not_found"
	NoRoute         Code = "no_route"
	MethodNotAllow  Code = "method_not_allowed"
	Duplicate       Code = "duplicate"
	Running         Code = "running"
	ReservationLost Code = "reservation_lost"
	TopicMode       Code = "topic_mode"
	Paused          Code = "paused"
	TooManyWaiters  Code = "too_many_waiters"
	Unavailable     Code = "unavailable"
	Contended       Code = "contended"
	OutcomeUnknown  Code = "outcome_unknown"
	Internal        Code = "internal"
)

// Info is what the table says of a code.
type Info struct {
	Code   Code
	Status int
	// Doc says when the code is given.
	Doc string
}

// Codes returns the table, in a stable order (a new slice each call).
func Codes() []Info {
	return []Info{
		{Invalid, http.StatusBadRequest, "the request is malformed: bad JSON, a wrong type, an unknown field, an invalid topic, id, time, option or cursor"},
		{TooLarge, http.StatusRequestEntityTooLarge, "the body, the payload, the headers or the batch is past its limit"},
		{Unauthorized, http.StatusUnauthorized, "no token, or an unknown one"},
		{Forbidden, http.StatusForbidden, "the token lacks the permission for the topic"},
		{NotFound, http.StatusNotFound, "no such job (nor in the run history)"},
		{NoRoute, http.StatusNotFound, "no such route, or a path not in canonical form (an empty, '.' or '..' segment), which is not redirected"},
		{MethodNotAllow, http.StatusMethodNotAllowed, "the route does not take this method"},
		{Duplicate, http.StatusConflict, "a job with this id exists (on_duplicate reject)"},
		{Running, http.StatusConflict, "the job is running or reserved: cancelled, but that run goes on"},
		{ReservationLost, http.StatusConflict, "the reservation is not current: lapsed, cancelled, or settled already"},
		{TopicMode, http.StatusConflict, "the topic is not pulled by this server (queue.pull), or is consumed the other way; or, on a started server, a job, schedule or requeue of a topic neither pulled nor pushed here"},
		{Paused, http.StatusConflict, "every topic asked for is paused"},
		{TooManyWaiters, http.StatusTooManyRequests, "the token holds http.max_polls_per_token long polls already"},
		{Unavailable, http.StatusServiceUnavailable, "Redis is unreachable or did not answer a read in time, or the server is shutting down: retry later"},
		{Contended, http.StatusServiceUnavailable, "a recurring schedule changed under the request at each of its tries (other clients declaring or removing it at once): nothing was done; retry"},
		{OutcomeUnknown, http.StatusGatewayTimeout, "Redis did not answer a write: the request may have been applied; sending it again is safe"},
		{Internal, http.StatusInternalServerError, "a bug: the detail is in the server's log"},
	}
}

// Status is the HTTP status of code.
func (c Code) Status() int {
	for _, i := range Codes() {
		if i.Code == c {
			return i.Status
		}
	}
	return http.StatusInternalServerError
}

// RESPPrefix is the error prefix the RESP front end answers code with:
// the code in capitals without '_' ("RESERVATIONLOST").
func (c Code) RESPPrefix() string {
	return strings.ToUpper(strings.ReplaceAll(string(c), "_", ""))
}

// Error is an error with its code, as both front ends send it.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// Error gives the code and the message.
func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Is matches any *Error of the same code, so errors.Is(err,
// &apierr.Error{Code: apierr.Duplicate}) (or a client's sentinel) tests
// the code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// New makes an Error.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
