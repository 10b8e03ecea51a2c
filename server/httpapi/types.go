package httpapi

import (
	"math"
	"time"
	"unicode/utf8"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/apierr"
)

// Payloads travel in JSON as "payload" (a string: its UTF-8 bytes) or
// "payload_base64" (standard base64, any bytes); a request gives one or
// neither (an empty payload), a response gives "payload" when the bytes
// are valid UTF-8 and "payload_base64" otherwise, so every byte string
// round-trips exactly.

// When says when a job is due: DelayMS (milliseconds from now, fractions
// allowed, down to the microsecond) or At (RFC 3339 with any fraction);
// neither means now.
type When struct {
	DelayMS *float64   `json:"delay_ms,omitempty"`
	At      *time.Time `json:"at,omitempty"`
}

func (w When) option() (wheelq.Option, error) {
	switch {
	case w.DelayMS != nil && w.At != nil:
		return nil, apierr.New(apierr.Invalid, "give delay_ms or at, not both")
	case w.DelayMS != nil:
		d := *w.DelayMS
		if d < 0 || math.IsNaN(d) || d > float64(math.MaxInt64/int64(time.Millisecond)) {
			return nil, apierr.New(apierr.Invalid, "delay_ms %v: want 0 or more", d)
		}
		return wheelq.After(time.Duration(d * float64(time.Millisecond))), nil
	case w.At != nil:
		return wheelq.At(*w.At), nil
	}
	return nil, nil
}

func (w When) due(now time.Time) time.Time {
	switch {
	case w.DelayMS != nil:
		return now.Add(time.Duration(*w.DelayMS * float64(time.Millisecond)))
	case w.At != nil:
		return *w.At
	}
	return now
}

// ScheduleRequest is the body of POST /v1/jobs/{topic}.
type ScheduleRequest struct {
	// ID is the caller's id for the job; empty: the server makes one.
	ID            string  `json:"id,omitempty"`
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 []byte  `json:"payload_base64,omitempty"`
	When
	MaxAttempts int               `json:"max_attempts,omitempty"`
	OnDuplicate string            `json:"on_duplicate,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
}

// options turns the request into Schedule's payload and options.
func (r *ScheduleRequest) options() ([]byte, []wheelq.Option, error) {
	var payload []byte
	switch {
	case r.Payload != nil && r.PayloadBase64 != nil:
		return nil, nil, apierr.New(apierr.Invalid, "give payload or payload_base64, not both")
	case r.Payload != nil:
		payload = []byte(*r.Payload)
	default:
		payload = r.PayloadBase64
	}
	var opts []wheelq.Option
	if r.ID != "" {
		opts = append(opts, wheelq.ID(r.ID))
	}
	w, err := r.When.option()
	if err != nil {
		return nil, nil, err
	}
	if w != nil {
		opts = append(opts, w)
	}
	if r.MaxAttempts != 0 {
		opts = append(opts, wheelq.MaxAttempts(r.MaxAttempts))
	}
	switch r.OnDuplicate {
	case "", "reject":
	case "replace":
		opts = append(opts, wheelq.OnDuplicate(wheelq.Replace))
	default:
		return nil, nil, apierr.New(apierr.Invalid, "on_duplicate %q: want reject or replace", r.OnDuplicate)
	}
	if r.Headers != nil {
		opts = append(opts, wheelq.Headers(r.Headers))
	}
	return payload, opts, nil
}

// ScheduleResponse answers a schedule: the job's topic and id, and its
// due time as the server reckoned it.
type ScheduleResponse struct {
	Topic string    `json:"topic"`
	ID    string    `json:"id"`
	Due   time.Time `json:"due"`
}

// BatchJob is one job of a batch: a ScheduleRequest with its topic.
type BatchJob struct {
	Topic string `json:"topic"`
	ScheduleRequest
}

// BatchRequest is the body of POST /v1/batch.
type BatchRequest struct {
	Jobs []BatchJob `json:"jobs"`
}

// BatchResult is one job's result in a batch, in the request's order:
// Status is the HTTP status it would have had alone (201, or an error's),
// with Error set on a failure.
type BatchResult struct {
	Status int           `json:"status"`
	Topic  string        `json:"topic"`
	ID     string        `json:"id,omitempty"`
	Due    *time.Time    `json:"due,omitempty"`
	Error  *apierr.Error `json:"error,omitempty"`
}

// BatchResponse answers a batch.
type BatchResponse struct {
	Results []BatchResult `json:"results"`
	// Failed counts the results that are errors.
	Failed int `json:"failed"`
}

// TimeRequest is the body of reschedule and requeue: the new due time.
type TimeRequest struct {
	When
}

// ReserveRequest is the body of POST /v1/reserve.
type ReserveRequest struct {
	Topics []string `json:"topics"`
	// Max is the most jobs to return (1 to 1000; 0: 1).
	Max int `json:"max,omitempty"`
	// TTRMS is the time-to-run in milliseconds (10 to 86,400,000; 0:
	// 30,000).
	TTRMS int64 `json:"ttr_ms,omitempty"`
	// WaitMS is how long to wait for a due job, in milliseconds (0: do
	// not wait; at most http.max_wait).
	WaitMS int64 `json:"wait_ms,omitempty"`
}

// Reserved is a job handed out by reserve.
type Reserved struct {
	Topic         string            `json:"topic"`
	ID            string            `json:"id"`
	Token         string            `json:"token"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Attempt       int               `json:"attempt"`
	MaxAttempts   int               `json:"max_attempts"`
	LastError     string            `json:"last_error,omitempty"`
	Due           time.Time         `json:"due"`
	Created       time.Time         `json:"created"`
	Deadline      time.Time         `json:"deadline"`
}

func reserved(r *wheelq.Reservation) Reserved {
	out := Reserved{Topic: r.Topic, ID: r.ID, Token: r.Token, Headers: r.Job.Headers, Attempt: r.Job.Attempt,
		MaxAttempts: r.Job.MaxAttempts, LastError: r.Job.LastError, Due: r.Job.Due, Created: r.Job.Created, Deadline: r.Deadline}
	if utf8.Valid(r.Job.Payload) {
		s := string(r.Job.Payload)
		out.Payload = &s
	} else {
		out.PayloadBase64 = r.Job.Payload
	}
	return out
}

// ReserveResponse answers reserve: the jobs, none if none came due
// within the wait.
type ReserveResponse struct {
	Jobs []Reserved `json:"jobs"`
}

// AckRequest is the body of ack.
type AckRequest struct {
	Token string `json:"token"`
}

// Receipt names a reservation: the job and the token reserve gave.
type Receipt struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
	Token string `json:"token"`
}

// AckBatchRequest is the body of POST /v1/ack: many reservations acked in
// one request (they share Redis round trips).
type AckBatchRequest struct {
	Receipts []Receipt `json:"receipts"`
}

// AckResult is one receipt's result, in the request's order: Status 204,
// or an error's with Error set.
type AckResult struct {
	Status int           `json:"status"`
	Error  *apierr.Error `json:"error,omitempty"`
}

// AckBatchResponse answers POST /v1/ack.
type AckBatchResponse struct {
	Results []AckResult `json:"results"`
	Failed  int         `json:"failed"`
}

// NackRequest is the body of nack.
type NackRequest struct {
	Token string `json:"token"`
	// Error is recorded as the job's last error.
	Error string `json:"error,omitempty"`
	// RetryAfterMS, if above 0, is when the job is due again; 0: the
	// backoff.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
	// Permanent dead-letters the job at once.
	Permanent bool `json:"permanent,omitempty"`
}

// TouchRequest is the body of touch.
type TouchRequest struct {
	Token string `json:"token"`
	// TTRMS is the new time-to-run from now, in milliseconds (0: 30,000).
	TTRMS int64 `json:"ttr_ms,omitempty"`
}

// TouchResponse answers touch.
type TouchResponse struct {
	Deadline time.Time `json:"deadline"`
}

// ListResponse answers list and dead: the jobs in due order and the
// cursor of the next page ("" at the end).
type ListResponse struct {
	Jobs []wheelq.JobInfo `json:"jobs"`
	Next string           `json:"next,omitempty"`
}

// TopicCounts are one topic's counts.
type TopicCounts struct {
	Topic   string `json:"topic"`
	Pending int64  `json:"pending"`
	Overdue int64  `json:"overdue"`
	Running int64  `json:"running"`
	Dead    int64  `json:"dead"`
	Paused  bool   `json:"paused"`
}

// CountsResponse answers counts.
type CountsResponse struct {
	Topics []TopicCounts `json:"topics"`
}

// ErrorResponse is every error's body.
type ErrorResponse struct {
	Error apierr.Error `json:"error"`
}

// HealthResponse answers /healthz and /readyz.
type HealthResponse struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

func ms(n int64, name string, lo, hi time.Duration) (time.Duration, error) {
	d := time.Duration(n) * time.Millisecond
	if n < 0 || d < lo || d > hi || n > int64(hi/time.Millisecond) {
		return 0, apierr.New(apierr.Invalid, "%s %d: want %d to %d", name, n, lo.Milliseconds(), hi.Milliseconds())
	}
	return d, nil
}

// CancelBatchRequest is the body of POST /v1/cancel: the jobs to cancel.
type CancelBatchRequest struct {
	Jobs []JobRef `json:"jobs"`
}

// JobRef names a job.
type JobRef struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
}
