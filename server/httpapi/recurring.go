package httpapi

// Recurring schedules over HTTP: PUT /v1/recurring/{name} declares one
// (Queue.DeclareRecurring), GET /v1/recurring lists them, DELETE removes
// one. Declaring and removing take the produce right on the schedule's
// topic; the list shows the schedules whose topics the token may produce
// to or administer.

import (
	"net/http"
	"time"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/internal/recurs"
)

// maxEveryMs is the longest interval taken (100 years), far inside
// time.Duration's range.
const maxEveryMs = 100 * 365 * 24 * 3600 * 1000

// RecurringRequest is the body of PUT /v1/recurring/{name}: the fields of
// wheelq.Recurring. Give cron or every_ms. missed is "latest" (the
// default), "skip" or "each".
type RecurringRequest struct {
	Topic         string            `json:"topic"`
	Cron          string            `json:"cron,omitempty"`
	EveryMs       int64             `json:"every_ms,omitempty"`
	TimeZone      string            `json:"time_zone,omitempty"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	MaxAttempts   int               `json:"max_attempts,omitempty"`
	Start         *time.Time        `json:"start,omitempty"`
	End           *time.Time        `json:"end,omitempty"`
	Missed        string            `json:"missed,omitempty"`
	MaxMissed     int               `json:"max_missed,omitempty"`
}

// Recurring is one schedule as GET /v1/recurring lists it (and PUT
// answers it): its fields (the payload in base64), its next slots, the
// latest slot whose job is stored and the job of its latest slot whose
// time came.
type Recurring struct {
	Name          string            `json:"name"`
	Topic         string            `json:"topic"`
	Cron          string            `json:"cron,omitempty"`
	EveryMs       int64             `json:"every_ms,omitempty"`
	TimeZone      string            `json:"time_zone,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	MaxAttempts   int               `json:"max_attempts,omitempty"`
	Start         *time.Time        `json:"start,omitempty"`
	End           *time.Time        `json:"end,omitempty"`
	Missed        string            `json:"missed"`
	MaxMissed     int               `json:"max_missed,omitempty"`
	Next          []time.Time       `json:"next"`
	Stored        *time.Time        `json:"stored,omitempty"`
	Last          *wheelq.JobInfo   `json:"last,omitempty"`
}

// RecurringList is the body of GET /v1/recurring.
type RecurringList struct {
	Recurring []Recurring `json:"recurring"`
}

var missedPolicies = map[string]wheelq.MissedPolicy{"": wheelq.MissedLatest, "latest": wheelq.MissedLatest,
	"skip": wheelq.MissedSkip, "each": wheelq.MissedEach}

func (r *RecurringRequest) recurring(name string) (wheelq.Recurring, error) {
	out := wheelq.Recurring{Name: name, Topic: r.Topic, Cron: r.Cron, Every: time.Duration(r.EveryMs) * time.Millisecond,
		TimeZone: r.TimeZone, Headers: r.Headers, MaxAttempts: r.MaxAttempts, MaxMissed: r.MaxMissed}
	switch {
	case r.Payload != nil && r.PayloadBase64 != nil:
		return out, apierr.New(apierr.Invalid, "give payload or payload_base64, not both")
	case r.Payload != nil:
		out.Payload = []byte(*r.Payload)
	default:
		out.Payload = r.PayloadBase64
	}
	if r.EveryMs < 0 || r.EveryMs > maxEveryMs {
		// (past the bound, every_ms in time.Duration would wrap)
		return out, apierr.New(apierr.Invalid, "every_ms %d: want 10 to %d (100 years)", r.EveryMs, int64(maxEveryMs))
	}
	m, ok := missedPolicies[r.Missed]
	if !ok {
		return out, apierr.New(apierr.Invalid, "missed %q: want latest, skip or each", r.Missed)
	}
	out.Missed = m
	if r.Start != nil {
		out.Start = *r.Start
	}
	if r.End != nil {
		out.End = *r.End
	}
	return out, nil
}

func recurringOut(ri wheelq.RecurringInfo) Recurring {
	out := Recurring{Name: ri.Name, Topic: ri.Topic, Cron: ri.Cron, EveryMs: ri.Every.Milliseconds(), TimeZone: ri.TimeZone,
		PayloadBase64: ri.Payload, Headers: ri.Headers, MaxAttempts: ri.MaxAttempts, Missed: ri.Missed.String(),
		MaxMissed: ri.MaxMissed, Next: []time.Time{}, Last: ri.Last}
	for _, n := range ri.Next {
		out.Next = append(out.Next, n.UTC())
	}
	if !ri.Start.IsZero() {
		s := ri.Start.UTC()
		out.Start = &s
	}
	if !ri.End.IsZero() {
		e := ri.End.UTC()
		out.End = &e
	}
	if !ri.Stored.IsZero() {
		s := ri.Stored.UTC()
		out.Stored = &s
	}
	return out
}

func (a *API) recurrings(r *http.Request) ([]wheelq.RecurringInfo, error) {
	ctx, cancel := a.ctx(r)
	defer cancel()
	return a.q.Recurrings(ctx)
}

func (a *API) putRecurring(w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	name := r.PathValue("name")
	var req RecurringRequest
	if err := a.decode(w, r, a.opts.MaxBody, &req); err != nil {
		return 0, nil, err
	}
	rec, err := req.recurring(name)
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	if err := recurs.Declare(ctx, a.q, p, rec); err != nil {
		return 0, nil, err
	}
	all, err := a.recurrings(r)
	if err != nil {
		return 0, nil, err
	}
	for _, ri := range all {
		if ri.Name == name {
			return http.StatusOK, recurringOut(ri), nil
		}
	}
	return 0, nil, apierr.New(apierr.NotFound, "recurring schedule %q: removed meanwhile", name)
}

func (a *API) listRecurring(_ http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	all, err := a.recurrings(r)
	if err != nil {
		return 0, nil, err
	}
	out := RecurringList{Recurring: []Recurring{}}
	for _, ri := range all {
		if p.AllowAny(ri.Topic, auth.Produce, auth.Admin) != nil {
			continue // a topic this token may not see
		}
		out.Recurring = append(out.Recurring, recurringOut(ri))
	}
	return http.StatusOK, out, nil
}

func (a *API) deleteRecurring(_ http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	ctx, cancel := a.ctx(r)
	defer cancel()
	if err := recurs.Remove(ctx, a.q, p, r.PathValue("name")); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}
