package wheelq

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// jobInfoJSON is wheelq's one JSON shape for a job: the CLI's -json, the
// dashboard's API and the server's all write it (snake_case, times in RFC
// 3339 with their fraction, absent fields left out). The payload is
// "payload", text, when it is UTF-8, else "payload_base64"; neither for a
// finished job (the run history keeps no payload).
type jobInfoJSON struct {
	Topic         string            `json:"topic"`
	ID            string            `json:"id"`
	State         string            `json:"state"`
	Due           *time.Time        `json:"due,omitempty"`
	Attempts      int               `json:"attempts"`
	MaxAttempts   int               `json:"max_attempts"`
	LastError     string            `json:"last_error,omitempty"`
	Created       *time.Time        `json:"created,omitempty"`
	Finished      *time.Time        `json:"finished,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
	Reserved      bool              `json:"reserved,omitempty"`
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// MarshalJSON writes j in wheelq's JSON shape for a job:
//
//	{"topic": "orders", "id": "o-1", "state": "pending",
//	 "due": "2026-11-26T10:00:00.5Z", "attempts": 0, "max_attempts": 10,
//	 "created": "2026-11-26T09:30:00Z", "payload": "{\"order\":1}"}
//
// with "last_error", "finished", "headers" and "reserved" (a consumer
// holds the job; "due" is then when its reservation lapses) when set, and
// the payload
// as "payload" (text) when it is UTF-8, else as "payload_base64".
func (j JobInfo) MarshalJSON() ([]byte, error) {
	v := jobInfoJSON{Topic: j.Topic, ID: j.ID, State: j.State.String(), Due: timeOrNil(j.Due),
		Attempts: j.Attempts, MaxAttempts: j.MaxAttempts, LastError: j.LastError,
		Created: timeOrNil(j.Created), Finished: timeOrNil(j.Finished), Headers: j.Headers, Reserved: j.Reserved}
	switch {
	case j.Payload == nil:
	case utf8.Valid(j.Payload):
		s := string(j.Payload)
		v.Payload = &s
	default:
		v.PayloadBase64 = j.Payload
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (j *JobInfo) UnmarshalJSON(b []byte) error {
	var v jobInfoJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	st, err := ParseJobState(v.State)
	if err != nil {
		return err
	}
	*j = JobInfo{Topic: v.Topic, ID: v.ID, State: st, Attempts: v.Attempts, MaxAttempts: v.MaxAttempts,
		LastError: v.LastError, Headers: v.Headers, Payload: v.PayloadBase64, Reserved: v.Reserved}
	for _, f := range []struct {
		dst *time.Time
		src *time.Time
	}{{&j.Due, v.Due}, {&j.Created, v.Created}, {&j.Finished, v.Finished}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	if v.Payload != nil {
		j.Payload = []byte(*v.Payload)
	}
	return nil
}

// ParseJobState returns the state named s (JobState.String's names); an
// unknown name is an ErrInvalidOption.
func ParseJobState(s string) (JobState, error) {
	for st := StatePending; st <= StateCancelled; st++ {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("%w: job state %q: want pending, running, dead, done or cancelled", ErrInvalidOption, s)
}
