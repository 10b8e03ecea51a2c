package wheelq

import (
	"fmt"

	"github.com/wheelq/wheelq/internal/breaker"
	"github.com/wheelq/wheelq/wheel"
)

// reach is the breaker of the calls that change jobs (Schedule, Cancel,
// Reschedule, Requeue and their batches): while Redis is known to be
// unreachable they fail at once with ErrUnavailable instead of each
// spending the client's whole dial-retry budget (about 0.8 s with
// go-redis's defaults); see internal/breaker.
type reach struct{ b breaker.Breaker }

// admit says whether a call may go to Redis now (by clock); its error
// wraps ErrUnavailable and the failure seen last.
func (r *reach) admit(clock wheel.Clock) (probe bool, err error) {
	if r.b.Up() {
		return false, nil // no clock read while Redis is reachable
	}
	probe, err = r.b.Admit(clock.Now())
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return probe, nil
}

// note records the outcome err of a call that admit let through.
func (r *reach) note(err error, probe bool, clock wheel.Clock) {
	if !probe && r.b.Up() && (err == nil || !breaker.IsConnErr(err)) {
		return // nothing to record: no clock read
	}
	r.b.Note(err, probe, clock.Now())
}
