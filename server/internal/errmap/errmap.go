// Package errmap maps the errors the server's front ends meet (the
// library's sentinels, auth's, a body past its limit) to apierr's codes.
// It is apart from apierr so that apierr, and the Go client that uses it,
// import the standard library only.
package errmap

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/auth"
)

// From maps err to its Error: an *apierr.Error as it is, the library's and
// auth's sentinels to their codes, anything else to Internal (whose
// message the front ends replace, logging the detail).
func From(err error) *apierr.Error {
	var e *apierr.Error
	if errors.As(err, &e) {
		return e
	}
	var mb *http.MaxBytesError
	code := apierr.Internal
	switch {
	case errors.As(err, &mb):
		code = apierr.TooLarge
	case errors.Is(err, auth.ErrUnauthorized):
		code = apierr.Unauthorized
	case errors.Is(err, auth.ErrForbidden):
		code = apierr.Forbidden
	case errors.Is(err, wheelq.ErrOutcomeUnknown):
		code = apierr.OutcomeUnknown
	case errors.Is(err, wheelq.ErrUnavailable), errors.Is(err, wheelq.ErrClosed), errors.Is(err, wheelq.ErrNotStarted):
		code = apierr.Unavailable
	case errors.Is(err, wheelq.ErrContended):
		code = apierr.Contended
	case errors.Is(err, wheelq.ErrDuplicate):
		code = apierr.Duplicate
	case errors.Is(err, wheelq.ErrNotFound):
		code = apierr.NotFound
	case errors.Is(err, wheelq.ErrRunning):
		code = apierr.Running
	case errors.Is(err, wheelq.ErrReservationLost):
		code = apierr.ReservationLost
	case errors.Is(err, wheelq.ErrTopicMode), errors.Is(err, wheelq.ErrNotPulled):
		code = apierr.TopicMode
	case errors.Is(err, wheelq.ErrPaused):
		code = apierr.Paused
	case errors.Is(err, wheelq.ErrPayloadTooLarge), errors.Is(err, wheelq.ErrHeadersTooLarge):
		code = apierr.TooLarge
	case errors.Is(err, wheelq.ErrInvalidTopic), errors.Is(err, wheelq.ErrInvalidID), errors.Is(err, wheelq.ErrInvalidOption),
		errors.Is(err, wheelq.ErrTooFar), errors.Is(err, wheelq.ErrInvalidCursor):
		code = apierr.Invalid
	case errors.Is(err, context.DeadlineExceeded):
		code = apierr.OutcomeUnknown
	}
	msg := err.Error()
	if tm := (*wheelq.TopicModeError)(nil); errors.As(err, &tm) && tm.Reason == wheelq.TopicNotRun {
		// The library's words name its Config; a server's user knows its
		// configuration's keys. What wraps the library's error (a batch's
		// job number, a call's name) stays.
		msg = strings.Replace(msg, tm.Error(),
			fmt.Sprintf("%v: topic %q is neither pulled nor pushed by this server (queue.pull, [[push.topic]])", wheelq.ErrTopicMode, tm.Topic), 1)
	}
	return &apierr.Error{Code: code, Message: msg}
}

// FromRead is From for a call that changes nothing: a read (a job, a
// list, counts, dead jobs, recurring schedules). What From takes for a
// write whose outcome is unknown (the call's deadline passing, the
// library's ErrOutcomeUnknown) can have applied nothing here, so it is
// Unavailable (503, retry later) rather than OutcomeUnknown, whose "may
// have been applied" only a write can mean.
func FromRead(err error) *apierr.Error {
	e := From(err)
	if e.Code == apierr.OutcomeUnknown {
		return &apierr.Error{Code: apierr.Unavailable, Message: e.Message}
	}
	return e
}
