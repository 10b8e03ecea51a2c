package errmap_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/internal/errmap"
)

// TestFrom: every sentinel a request can meet maps to its code, wrapped
// as the library wraps them.
func TestFrom(t *testing.T) {
	for err, code := range map[error]apierr.Code{
		wheelq.ErrDuplicate: apierr.Duplicate, wheelq.ErrNotFound: apierr.NotFound, wheelq.ErrRunning: apierr.Running,
		wheelq.ErrOutcomeUnknown: apierr.OutcomeUnknown, wheelq.ErrUnavailable: apierr.Unavailable, wheelq.ErrClosed: apierr.Unavailable,
		wheelq.ErrNotStarted: apierr.Unavailable, wheelq.ErrPayloadTooLarge: apierr.TooLarge, wheelq.ErrHeadersTooLarge: apierr.TooLarge,
		wheelq.ErrInvalidTopic: apierr.Invalid, wheelq.ErrInvalidID: apierr.Invalid, wheelq.ErrInvalidOption: apierr.Invalid,
		wheelq.ErrTooFar: apierr.Invalid, wheelq.ErrInvalidCursor: apierr.Invalid, wheelq.ErrReservationLost: apierr.ReservationLost,
		wheelq.ErrTopicMode: apierr.TopicMode, wheelq.ErrNotPulled: apierr.TopicMode, wheelq.ErrPaused: apierr.Paused,
		auth.ErrUnauthorized: apierr.Unauthorized, auth.ErrForbidden: apierr.Forbidden, &http.MaxBytesError{Limit: 1}: apierr.TooLarge,
		context.DeadlineExceeded: apierr.OutcomeUnknown, errors.New("boom"): apierr.Internal,
		wheelq.ErrContended: apierr.Contended,
	} {
		got := errmap.From(fmt.Errorf("wheelq: op: %w", err))
		require.Equal(t, code, got.Code, "%v", err)
		require.NotEmpty(t, got.Message)
	}
	e := apierr.New(apierr.Paused, "x")
	require.Same(t, e, errmap.From(e))
	require.True(t, errors.Is(fmt.Errorf("w: %w", e), &apierr.Error{Code: apierr.Paused}))
	require.False(t, errors.Is(e, &apierr.Error{Code: apierr.Invalid}))
}

// TestFromTopicNotRun: a job of a topic the server neither pulls nor
// pushes is told in the server's configuration's terms, whatever wraps
// the library's error; the library's other topic-mode refusals keep its
// words.
func TestFromTopicNotRun(t *testing.T) {
	err := fmt.Errorf("job 3: %w", &wheelq.TopicModeError{Topic: "ordres", Reason: wheelq.TopicNotRun})
	got := errmap.From(err)
	require.Equal(t, apierr.TopicMode, got.Code)
	require.Equal(t, `job 3: wheelq: topic consumed another way: topic "ordres" is neither pulled nor pushed by this server (queue.pull, [[push.topic]])`, got.Message)
	err = &wheelq.TopicModeError{Topic: "p", Reason: wheelq.TopicPulled}
	got = errmap.From(err)
	require.Equal(t, apierr.TopicMode, got.Code)
	require.Equal(t, err.Error(), got.Message)
}

// TestFromRead: for a read, what would be outcome_unknown (a deadline
// passed, ErrOutcomeUnknown) is unavailable; every other code is From's.
func TestFromRead(t *testing.T) {
	for err, code := range map[error]apierr.Code{
		context.DeadlineExceeded: apierr.Unavailable, wheelq.ErrOutcomeUnknown: apierr.Unavailable,
		wheelq.ErrUnavailable: apierr.Unavailable, wheelq.ErrNotFound: apierr.NotFound, auth.ErrForbidden: apierr.Forbidden,
		wheelq.ErrInvalidCursor: apierr.Invalid, errors.New("boom"): apierr.Internal,
	} {
		got := errmap.FromRead(fmt.Errorf("wheelq: lookup: %w", err))
		require.Equal(t, code, got.Code, "%v", err)
		require.Contains(t, got.Message, err.Error())
	}
	e := apierr.New(apierr.Duplicate, "x")
	require.Same(t, e, errmap.FromRead(e))
}
