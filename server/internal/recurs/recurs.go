// Package recurs is what the HTTP and RESP front ends share about
// recurring schedules: who may declare or remove one.
package recurs

import (
	"context"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/auth"
)

// Declare declares r for p: p needs the produce right on r's topic and,
// when a schedule of that name is stored on another topic, on that one
// too, so that a token cannot take another tenant's schedule over (and
// then remove it) by its name. The check is made on the schedule the
// declaration replaces, in the same compare-and-set
// (Queue.DeclareRecurringIf): one declared by another client meanwhile
// is checked in its turn.
func Declare(ctx context.Context, q *wheelq.Queue, p *auth.Principal, r wheelq.Recurring) error {
	if err := p.Allow(auth.Produce, r.Topic); err != nil {
		return err
	}
	return q.DeclareRecurringIf(ctx, r, owner(p))
}

// Remove removes the schedule name for p, who needs the produce right on
// its topic, checked on the schedule removed (Queue.RemoveRecurringIf).
// wheelq.ErrNotFound if there is none.
func Remove(ctx context.Context, q *wheelq.Queue, p *auth.Principal, name string) error {
	return q.RemoveRecurringIf(ctx, name, owner(p))
}

// owner is the check that p may change a stored schedule: the produce
// right on its topic.
func owner(p *auth.Principal) func(*wheelq.Recurring) error {
	return func(stored *wheelq.Recurring) error {
		if stored == nil {
			return nil
		}
		return p.Allow(auth.Produce, stored.Topic)
	}
}
