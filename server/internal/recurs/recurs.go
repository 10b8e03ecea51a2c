// Package recurs is what the HTTP and RESP front ends share about
// recurring schedules: who may declare or remove one.
package recurs

import (
	"context"
	"fmt"

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
	return q.DeclareRecurringIf(ctx, r, owner(p, r.Name))
}

// Remove removes the schedule name for p, who needs the produce right on
// its topic, checked on the schedule removed (Queue.RemoveRecurringIf).
// wheelq.ErrNotFound if there is none.
func Remove(ctx context.Context, q *wheelq.Queue, p *auth.Principal, name string) error {
	return q.RemoveRecurringIf(ctx, name, owner(p, name))
}

// owner is the check that p may change the stored schedule name: the
// produce right on its topic. The refusal does not name that topic: it
// is one p has no right on (another tenant's), and a name is all p gave.
func owner(p *auth.Principal, name string) func(*wheelq.Recurring) error {
	return func(stored *wheelq.Recurring) error {
		if stored == nil {
			return nil
		}
		if p.Allow(auth.Produce, stored.Topic) != nil {
			return fmt.Errorf("%w: token %s may not change recurring schedule %q: it is of a topic the token may not produce to",
				auth.ErrForbidden, p.ID, name)
		}
		return nil
	}
}
