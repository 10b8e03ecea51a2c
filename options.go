package wheelq

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/wheelq/wheelq/internal/persist"
)

// DuplicatePolicy says what Schedule does when the job's id exists.
type DuplicatePolicy int

// Duplicate policies.
const (
	// Reject fails with ErrDuplicate and changes nothing (the default).
	Reject DuplicatePolicy = iota
	// Replace overwrites the job (payload, due time, attempts), and
	// revives it if it was dead-lettered.
	Replace
)

// Option configures one Schedule call. The set is sealed: only this
// package's functions make options. Of two options of one kind (two
// MaxAttempts, say) the later wins; At and After are two ways to give the
// due time, and together they are an error.
type Option interface {
	apply(*scheduleOpts)
	String() string
}

type scheduleOpts struct {
	at          time.Time
	after       time.Duration
	hasAt       bool
	hasAfter    bool
	id          string
	hasID       bool
	maxAttempts int
	hasMax      bool
	dup         DuplicatePolicy
	headers     map[string]string // the caller's map, or a merged copy
}

// The options are small value types, so that a Schedule call formats
// nothing and allocates little; String is only for printing.
type (
	atOpt          time.Time
	afterOpt       time.Duration
	idOpt          string
	maxAttemptsOpt int
	dupOpt         DuplicatePolicy
	headersOpt     map[string]string
)

func (o atOpt) apply(s *scheduleOpts)          { s.at, s.hasAt = time.Time(o), true }
func (o afterOpt) apply(s *scheduleOpts)       { s.after, s.hasAfter = time.Duration(o), true }
func (o idOpt) apply(s *scheduleOpts)          { s.id, s.hasID = string(o), true }
func (o maxAttemptsOpt) apply(s *scheduleOpts) { s.maxAttempts, s.hasMax = int(o), true }
func (o dupOpt) apply(s *scheduleOpts)         { s.dup = DuplicatePolicy(o) }
func (o headersOpt) apply(s *scheduleOpts) {
	if len(s.headers) == 0 {
		s.headers = o
		return
	}
	merged := maps.Clone(s.headers) // never write to a caller's map
	maps.Copy(merged, o)
	s.headers = merged
}

func (o atOpt) String() string          { return fmt.Sprintf("At(%v)", time.Time(o)) }
func (o afterOpt) String() string       { return fmt.Sprintf("After(%v)", time.Duration(o)) }
func (o idOpt) String() string          { return fmt.Sprintf("ID(%q)", string(o)) }
func (o maxAttemptsOpt) String() string { return fmt.Sprintf("MaxAttempts(%d)", int(o)) }
func (o headersOpt) String() string     { return fmt.Sprintf("Headers(%v)", map[string]string(o)) }
func (o dupOpt) String() string {
	switch DuplicatePolicy(o) {
	case Reject:
		return "OnDuplicate(Reject)"
	case Replace:
		return "OnDuplicate(Replace)"
	}
	return fmt.Sprintf("OnDuplicate(%d)", int(o))
}

// At schedules the job at t. A time in the past runs the job at once. At
// together with After is an ErrInvalidOption.
// At(time.Time{}), the zero time, is an ErrInvalidOption: an uninitialised
// time in the caller must not run a job (a deletion, say) at once.
func At(t time.Time) Option { return atOpt(t) }

// After schedules the job d from now (the default is now). After together
// with At is an ErrInvalidOption.
func After(d time.Duration) Option { return afterOpt(d) }

// ID gives the job an id of the caller's choosing, so that scheduling is
// idempotent and the job can be cancelled or rescheduled by that id. The
// id has 1 to 512 bytes: ID("") is an ErrInvalidID, not a request for a
// random id. Without ID a random id is made: 12 URL-safe characters with
// 66 random bits (the last character is chosen so that consecutive new
// jobs share a partition, which lets a batch of them be written with few
// commands).
func ID(id string) Option { return idOpt(id) }

// MaxAttempts overrides Config.MaxAttempts for this job: n runs, from 1
// to 2^31-1; any other n is an ErrInvalidOption.
func MaxAttempts(n int) Option { return maxAttemptsOpt(n) }

// maxAttemptsLimit is the most attempts a record can store.
const maxAttemptsLimit = 1<<31 - 1

// OnDuplicate sets what happens when the job's id exists. A policy other
// than Reject and Replace is an ErrInvalidOption.
func OnDuplicate(p DuplicatePolicy) Option { return dupOpt(p) }

// Headers gives the job string pairs that travel with it to its handler
// (Job.Headers), beside the payload: trace context (contrib/otel puts the
// W3C traceparent there), a tenant, a correlation id. They are stored in
// the job's record, copied at Schedule (the caller may reuse h), and kept
// through retries, requeues and reschedules. Unlike the other options,
// Headers given twice are merged (the later's value wins for a key in
// both), so that a wrapper can add its own to the caller's.
//
// At most MaxHeaders pairs of at most MaxHeadersSize bytes in all (keys
// and values); more is an ErrHeadersTooLarge. A job scheduled with
// headers is unreadable to processes of releases before Headers came
// (they dead-letter it as corrupt): upgrade every process first.
func Headers(h map[string]string) Option { return headersOpt(h) }

// The limits of Headers.
const (
	// MaxHeaders is the most pairs a job's Headers may have.
	MaxHeaders = 16
	// MaxHeadersSize is the most bytes of a job's Headers, the lengths of
	// its keys and values summed.
	MaxHeadersSize = 4096
)

// ErrHeadersTooLarge is returned by Schedule for Headers with more than
// MaxHeaders pairs or MaxHeadersSize bytes.
var ErrHeadersTooLarge = errors.New("wheelq: headers too large")

// checkHeaders checks the size of a job's headers.
func checkHeaders(h map[string]string) error {
	if len(h) > MaxHeaders {
		return fmt.Errorf("%w: %d pairs, at most %d", ErrHeadersTooLarge, len(h), MaxHeaders)
	}
	size := 0
	for k, v := range h {
		size += len(k) + len(v)
	}
	if size > MaxHeadersSize {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrHeadersTooLarge, size, MaxHeadersSize)
	}
	return nil
}

// printable reports whether s is valid UTF-8 without control characters
// (C0, DEL, C1): a name that prints on one line of any listing.
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// validID checks a job id given by the caller: 1 to 512 bytes of UTF-8
// without control characters.
func validID(id string) error {
	if id == "" || len(id) > 512 {
		return fmt.Errorf("%w: %d bytes, want 1 to 512", ErrInvalidID, len(id))
	}
	if !printable(id) {
		return fmt.Errorf("%w: %q: want UTF-8 without control characters", ErrInvalidID, id)
	}
	return nil
}

// validTopic checks a topic: 1 to 256 bytes of UTF-8 without control
// characters or '/'.
// CheckTopic says whether topic is a name the queue takes (1 to 256
// bytes of UTF-8, no control characters, no '/'): nil, or an
// ErrInvalidTopic saying why. A front end checks several names with it
// before acting on any.
func CheckTopic(topic string) error { return validTopic(topic) }

func validTopic(topic string) error {
	if topic == "" || len(topic) > 256 {
		return fmt.Errorf("%w: %q must have 1 to 256 bytes", ErrInvalidTopic, topic)
	}
	if strings.Contains(topic, persist.KeySep) {
		return fmt.Errorf("%w: %q contains %q", ErrInvalidTopic, topic, persist.KeySep)
	}
	if !printable(topic) {
		return fmt.Errorf("%w: %q: want UTF-8 without control characters", ErrInvalidTopic, topic)
	}
	return nil
}
