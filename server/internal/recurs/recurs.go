// Package recurs is what the HTTP and RESP front ends share about
// recurring schedules: who may declare one.
package recurs

import (
	"context"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/auth"
)

// MayDeclare returns nil if p may declare the schedule name on topic: it
// needs the produce right on topic and, when a schedule of that name
// exists on another topic, on that one too, so that a token cannot take
// another tenant's schedule over (and then remove it) by its name. The
// check reads the schedules first: a schedule declared by another client
// between it and the declaration is replaced all the same.
func MayDeclare(ctx context.Context, q *wheelq.Queue, p *auth.Principal, name, topic string) error {
	if err := p.Allow(auth.Produce, topic); err != nil {
		return err
	}
	all, err := q.Recurrings(ctx)
	if err != nil {
		return err
	}
	for _, ri := range all {
		if ri.Name == name && ri.Topic != topic {
			return p.Allow(auth.Produce, ri.Topic)
		}
	}
	return nil
}
