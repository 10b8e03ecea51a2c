// Package client is a small Go client of the wheelq server's HTTP API,
// for services that do not embed wheelq: schedule, cancel, reschedule,
// get, reserve (a long poll, or a stream: ReserveStream), ack, nack,
// touch, and recurring schedules (declare, list, remove). It speaks the
// API's JSON with the standard library only; an error of the server is
// an *apierr.Error, which errors.Is matches against this package's
// sentinels by code. Only a 2xx reply is success, and only with the JSON
// body expected. A reply that is not the server's (a proxy's 502, 503 or
// 504 page) matches ErrUnavailable or ErrOutcomeUnknown as its status
// allows, and a server that refuses connections (restarting)
// ErrUnavailable:
//
//	c := client.New("http://127.0.0.1:8780", os.Getenv("WHEELQ_TOKEN"))
//	_, err := c.Schedule(ctx, "orders.expire", []byte(order), client.Schedule{ID: order, Delay: 30 * time.Minute})
//	if errors.Is(err, client.ErrDuplicate) { ... }
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/wheelq/wheelq/server/apierr"
)

// Sentinels for errors.Is: one per code the server answers with
// (apierr.Codes).
var (
	ErrInvalid         = &apierr.Error{Code: apierr.Invalid}
	ErrTooLarge        = &apierr.Error{Code: apierr.TooLarge}
	ErrUnauthorized    = &apierr.Error{Code: apierr.Unauthorized}
	ErrForbidden       = &apierr.Error{Code: apierr.Forbidden}
	ErrNotFound        = &apierr.Error{Code: apierr.NotFound}
	ErrDuplicate       = &apierr.Error{Code: apierr.Duplicate}
	ErrRunning         = &apierr.Error{Code: apierr.Running}
	ErrReservationLost = &apierr.Error{Code: apierr.ReservationLost}
	ErrTopicMode       = &apierr.Error{Code: apierr.TopicMode}
	ErrPaused          = &apierr.Error{Code: apierr.Paused}
	ErrTooManyWaiters  = &apierr.Error{Code: apierr.TooManyWaiters}
	ErrUnavailable     = &apierr.Error{Code: apierr.Unavailable}
	// ErrContended: a recurring schedule changed under the request at
	// each of the server's tries; nothing was done: retry.
	ErrContended      = &apierr.Error{Code: apierr.Contended}
	ErrOutcomeUnknown = &apierr.Error{Code: apierr.OutcomeUnknown}
	// ErrNoRoute: no such route, or a path not in canonical form.
	ErrNoRoute = &apierr.Error{Code: apierr.NoRoute}
	// ErrMethodNotAllowed: the route does not take the method.
	ErrMethodNotAllowed = &apierr.Error{Code: apierr.MethodNotAllow}
	// ErrInternal: a bug of the server (the detail is in its log).
	ErrInternal = &apierr.Error{Code: apierr.Internal}
)

// Client calls one wheelq server.
type Client struct {
	base  string
	token string
	// HTTP is the client requests go through (nil: a default one); the
	// default has no timeout of its own: each call's context bounds it.
	// Its Timeout, if set, bounds each ordinary request as it is. A
	// Reserve with a Wait is not cut short by it: that long poll goes
	// through a copy of HTTP without Timeout (the same Transport, so the
	// same connections), bounded instead by Timeout + Wait, so a Timeout
	// meant for ordinary calls need not be longer than any Wait. A
	// ReserveStream is bounded the same way, not counting the time spent
	// in its function.
	HTTP *http.Client
}

// New returns a client of the server at base ("http://host:port") with
// token ("" for a loopback server without tokens).
func New(base, token string) *Client {
	return &Client{base: strings.TrimRight(base, "/"), token: token, HTTP: &http.Client{}}
}

// Schedule says when and how a job runs.
type Schedule struct {
	// ID is the job's id; "" lets the server make one.
	ID string
	// Delay or At: when it is due (neither: now).
	Delay       time.Duration
	At          time.Time
	MaxAttempts int
	// Replace overwrites an existing job of the same id instead of
	// failing with ErrDuplicate.
	Replace bool
	Headers map[string]string
}

type scheduleBody struct {
	ID            string            `json:"id,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
	DelayMS       *float64          `json:"delay_ms,omitempty"`
	At            *time.Time        `json:"at,omitempty"`
	MaxAttempts   int               `json:"max_attempts,omitempty"`
	OnDuplicate   string            `json:"on_duplicate,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
}

// Scheduled is what Schedule returns.
type Scheduled struct {
	Topic string    `json:"topic"`
	ID    string    `json:"id"`
	Due   time.Time `json:"due"`
}

// Schedule stores a job; it returns once the server's Redis has it.
func (c *Client) Schedule(ctx context.Context, topic string, payload []byte, s Schedule) (Scheduled, error) {
	b := scheduleBody{ID: s.ID, PayloadBase64: payload, MaxAttempts: s.MaxAttempts, Headers: s.Headers}
	switch {
	case !s.At.IsZero():
		b.At = &s.At
	case s.Delay > 0:
		ms := float64(s.Delay) / float64(time.Millisecond)
		b.DelayMS = &ms
	}
	if s.Replace {
		b.OnDuplicate = "replace"
	}
	var out Scheduled
	path := "/v1/jobs/" + segment(topic)
	if err := c.do(ctx, "POST", path, b, &out); err != nil {
		return Scheduled{}, err
	}
	if out.ID == "" {
		return Scheduled{}, malformed("POST", path, "has no job id")
	}
	return out, nil
}

// Cancel deletes a job: it never runs after Cancel returned nil
// (ErrRunning: it was running or reserved; deleted, but that run goes on).
func (c *Client) Cancel(ctx context.Context, topic, id string) error {
	return c.do(ctx, "DELETE", jobPath(topic, id), nil, nil)
}

// Reschedule moves a pending job's due time to at.
func (c *Client) Reschedule(ctx context.Context, topic, id string, at time.Time) error {
	return c.do(ctx, "POST", jobPath(topic, id)+"/reschedule", map[string]any{"at": at}, nil)
}

// Job is a job as Get returns it.
type Job struct {
	Topic         string            `json:"topic"`
	ID            string            `json:"id"`
	State         string            `json:"state"`
	Due           time.Time         `json:"due"`
	Attempts      int               `json:"attempts"`
	MaxAttempts   int               `json:"max_attempts"`
	LastError     string            `json:"last_error"`
	Created       time.Time         `json:"created"`
	Finished      time.Time         `json:"finished"`
	Headers       map[string]string `json:"headers"`
	Payload       *string           `json:"payload"`
	PayloadBase64 []byte            `json:"payload_base64"`
	Reserved      bool              `json:"reserved"`
}

// Bytes is the job's payload (nil for a finished job).
func (j *Job) Bytes() []byte {
	if j.Payload != nil {
		return []byte(*j.Payload)
	}
	return j.PayloadBase64
}

// Get says what became of a job.
func (c *Client) Get(ctx context.Context, topic, id string) (Job, error) {
	var j Job
	path := jobPath(topic, id)
	if err := c.do(ctx, "GET", path, nil, &j); err != nil {
		return Job{}, err
	}
	if j.ID == "" || j.State == "" {
		return Job{}, malformed("GET", path, "has no job id or state")
	}
	return j, nil
}

// Reserve asks.
type Reserve struct {
	Topics []string
	// Max jobs (0: 1); TTR (0: the server's default, 30 s; under a
	// millisecond but not 0: ErrInvalid, the API counts it in ms); Wait
	// for a due job (0: only those due now).
	Max  int
	TTR  time.Duration
	Wait time.Duration
}

// Reservation is a reserved job.
type Reservation struct {
	Topic         string            `json:"topic"`
	ID            string            `json:"id"`
	Token         string            `json:"token"`
	Payload       *string           `json:"payload"`
	PayloadBase64 []byte            `json:"payload_base64"`
	Headers       map[string]string `json:"headers"`
	Attempt       int               `json:"attempt"`
	MaxAttempts   int               `json:"max_attempts"`
	LastError     string            `json:"last_error"`
	Due           time.Time         `json:"due"`
	Created       time.Time         `json:"created"`
	Deadline      time.Time         `json:"deadline"`
}

// Bytes is the job's payload.
func (r *Reservation) Bytes() []byte {
	if r.Payload != nil {
		return []byte(*r.Payload)
	}
	return r.PayloadBase64
}

// Reserve waits up to r.Wait for due jobs of r.Topics and reserves up to
// r.Max of them; none (and no error) if none came due. The wait is not
// cut short by the Timeout of c.HTTP: a Reserve with a Wait is bounded by
// that Timeout + Wait instead (and by ctx), so a client whose Timeout is
// 10 s may wait 30 s. Past that bound the error matches
// context.DeadlineExceeded, as the http.Client's own timeout does.
func (c *Client) Reserve(ctx context.Context, r Reserve) ([]Reservation, error) {
	var out struct {
		Jobs *[]Reservation `json:"jobs"`
	}
	if err := checkTTR("POST", "/v1/reserve", r.TTR); err != nil {
		return nil, err
	}
	if err := c.send(ctx, r.Wait, "POST", "/v1/reserve", reserveBody(r), &out); err != nil {
		return nil, err
	}
	if out.Jobs == nil {
		return nil, malformed("POST", "/v1/reserve", "has no jobs list")
	}
	return *out.Jobs, nil
}

// Ack says a reserved job is done.
func (c *Client) Ack(ctx context.Context, r *Reservation) error {
	return c.do(ctx, "POST", jobPath(r.Topic, r.ID)+"/ack", map[string]string{"token": r.Token}, nil)
}

// AckAll acks many reserved jobs in one request (they share Redis round
// trips); it returns one error per reservation, nil where acked, and an
// error of the request as a whole. No reservations: nil, nil, and no
// request.
func (c *Client) AckAll(ctx context.Context, rs []Reservation) ([]error, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	type receipt struct {
		Topic string `json:"topic"`
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	body := struct {
		Receipts []receipt `json:"receipts"`
	}{}
	for _, r := range rs {
		body.Receipts = append(body.Receipts, receipt{r.Topic, r.ID, r.Token})
	}
	var out struct {
		Results []struct {
			Error *apierr.Error `json:"error"`
		} `json:"results"`
	}
	if err := c.do(ctx, "POST", "/v1/ack", body, &out); err != nil {
		return nil, err
	}
	if len(out.Results) != len(rs) {
		return nil, malformed("POST", "/v1/ack", fmt.Sprintf("has %d results for %d receipts", len(out.Results), len(rs)))
	}
	errs := make([]error, len(rs))
	for i := range errs {
		if out.Results[i].Error != nil {
			errs[i] = out.Results[i].Error
		}
	}
	return errs, nil
}

// MaxCause is the most bytes of a Nack's cause sent. The server takes a
// nack body of up to 8 KiB and keeps a job's last error to 2,048 bytes
// (cut without regard to UTF-8), so a longer cause is cut here, at a
// UTF-8 boundary, to end with TruncatedMarker within MaxCause. A cause of
// many characters JSON escapes (control characters, invalid UTF-8) is cut
// shorter, so that its JSON stays within 7 KiB.
const MaxCause = 2048

// TruncatedMarker ends a cause Nack cut.
const TruncatedMarker = "… (truncated)"

// maxCauseJSON bounds a cause's JSON string (quotes and escapes
// included), leaving room in the nack body for the token and options.
const maxCauseJSON = 7 << 10

// Nack says a reserved job failed: retried after retryAfter (0: the
// server's backoff), or dead-lettered if permanent. A cause longer than
// MaxCause bytes is cut (see MaxCause), so that the nack is not refused
// too_large, which would leave the job reserved until its time-to-run.
func (c *Client) Nack(ctx context.Context, r *Reservation, cause string, retryAfter time.Duration, permanent bool) error {
	return c.do(ctx, "POST", jobPath(r.Topic, r.ID)+"/nack", map[string]any{"token": r.Token, "error": truncateCause(cause),
		"retry_after_ms": retryAfter.Milliseconds(), "permanent": permanent}, nil)
}

// truncateCause cuts cause at a rune boundary to at most MaxCause bytes
// and maxCauseJSON bytes of JSON, TruncatedMarker included.
func truncateCause(cause string) string {
	size, enc := 0, 2
	for i, r := range cause {
		n := utf8.RuneLen(r)
		if r == utf8.RuneError {
			_, n = utf8.DecodeRuneInString(cause[i:])
		}
		size += n
		enc += jsonLen(r, n)
	}
	if size <= MaxCause && enc <= maxCauseJSON {
		return cause
	}
	size, enc = 0, 2
	maxSize, maxEnc := MaxCause-len(TruncatedMarker), maxCauseJSON-len(TruncatedMarker)
	for i, r := range cause {
		n := utf8.RuneLen(r)
		if r == utf8.RuneError {
			_, n = utf8.DecodeRuneInString(cause[i:])
		}
		e := jsonLen(r, n)
		if size+n > maxSize || enc+e > maxEnc {
			return cause[:i] + TruncatedMarker
		}
		size += n
		enc += e
	}
	return cause + TruncatedMarker
}

// jsonLen is how many bytes encoding/json (without HTML escaping) writes
// for rune r of n bytes in a string.
func jsonLen(r rune, n int) int {
	switch {
	case r == utf8.RuneError && n == 1:
		return 6 // \ufffd
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20 || r == '\u2028' || r == '\u2029':
		return 6
	}
	return n
}

// Touch extends a reservation to ttr from now (0: the server's default,
// 30 s; under a millisecond but not 0: ErrInvalid); it returns the new
// deadline.
func (c *Client) Touch(ctx context.Context, r *Reservation, ttr time.Duration) (time.Time, error) {
	var out struct {
		Deadline time.Time `json:"deadline"`
	}
	path := jobPath(r.Topic, r.ID) + "/touch"
	if err := checkTTR("POST", path, ttr); err != nil {
		return time.Time{}, err
	}
	if err := c.do(ctx, "POST", path, map[string]any{"token": r.Token, "ttr_ms": ttr.Milliseconds()}, &out); err != nil {
		return time.Time{}, err
	}
	if out.Deadline.IsZero() {
		return time.Time{}, malformed("POST", path, "has no deadline")
	}
	r.Deadline = out.Deadline
	return out.Deadline, nil
}

// Recurring is a recurring schedule as DeclareRecurring takes it: the
// fields of wheelq.Recurring, as the API's PUT /v1/recurring/{name} takes
// them. Give Cron or Every.
type Recurring struct {
	// Name names the schedule: 1 to 200 bytes of UTF-8 without control
	// characters (its path segment is escaped, "." and ".." included).
	Name string
	// Topic is that of each slot's job.
	Topic string
	// Cron is a cron expression (five fields, six with seconds first, or
	// @yearly, @monthly, @weekly, @daily, @hourly, @every DURATION) in
	// TimeZone's local wall-clock time.
	Cron string
	// Every is a fixed interval: a whole number of milliseconds (else
	// ErrInvalid, without a request), at least 10; slots at Start + k ×
	// Every (the Unix epoch without a Start).
	Every time.Duration
	// TimeZone is an IANA name ("Europe/Paris"); "" is UTC.
	TimeZone string
	// Payload, Headers and MaxAttempts are those of each slot's job
	// (MaxAttempts 0: the server's default).
	Payload     []byte
	Headers     map[string]string
	MaxAttempts int
	// Start and End bound the slots (zero: unbounded; End inclusive).
	Start, End time.Time
	// Missed is what to do with the slots missed while no server ran:
	// "latest" (run the latest once; "" is "latest"), "skip" or "each"
	// (each of the latest MaxMissed).
	Missed    string
	MaxMissed int
}

// RecurringInfo is a stored recurring schedule, as DeclareRecurring
// returns it and Recurrings lists it (Missed is always set; an empty
// Payload is nil).
type RecurringInfo struct {
	Recurring
	// Next holds the schedule's next slots (up to 3; none once End has
	// passed).
	Next []time.Time
	// Stored is the latest slot whose job is stored (zero: none yet).
	Stored time.Time
	// Last is the job of the latest slot whose time came, with its state
	// (nil if there was none or it is no longer known).
	Last *Job
}

type recurringBody struct {
	Topic         string            `json:"topic"`
	Cron          string            `json:"cron,omitempty"`
	EveryMs       int64             `json:"every_ms,omitempty"`
	TimeZone      string            `json:"time_zone,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	MaxAttempts   int               `json:"max_attempts,omitempty"`
	Start         *time.Time        `json:"start,omitempty"`
	End           *time.Time        `json:"end,omitempty"`
	Missed        string            `json:"missed,omitempty"`
	MaxMissed     int               `json:"max_missed,omitempty"`
}

type recurringReply struct {
	Name string `json:"name"`
	recurringBody
	Next   []time.Time `json:"next"`
	Stored *time.Time  `json:"stored"`
	Last   *Job        `json:"last"`
}

func (r *recurringReply) info() RecurringInfo {
	ri := RecurringInfo{Recurring: Recurring{Name: r.Name, Topic: r.Topic, Cron: r.Cron,
		Every: time.Duration(r.EveryMs) * time.Millisecond, TimeZone: r.TimeZone, Payload: r.PayloadBase64,
		Headers: r.Headers, MaxAttempts: r.MaxAttempts, Missed: r.Missed, MaxMissed: r.MaxMissed},
		Next: r.Next, Last: r.Last}
	if len(ri.Payload) == 0 {
		ri.Payload = nil
	}
	if r.Start != nil {
		ri.Start = *r.Start
	}
	if r.End != nil {
		ri.End = *r.End
	}
	if r.Stored != nil {
		ri.Stored = *r.Stored
	}
	return ri
}

// valid says the reply holds what the API always sends of a schedule.
func (r *recurringReply) valid() bool {
	return r.Name != "" && r.Topic != "" && r.Missed != "" && r.Next != nil
}

// DeclareRecurring declares the recurring schedule r.Name, or replaces
// the one of that name (declaring the same fields again changes nothing);
// each slot's job runs once. It needs the produce right on r.Topic and,
// if a schedule of that name is stored on another topic, on that one too
// (else ErrForbidden). It returns the schedule as stored, with its next
// slots. Bad fields are ErrInvalid (an empty Name or an Every that is not
// a whole number of milliseconds without a request); a topic the server
// neither pulls nor pushes ErrTopicMode; a schedule removed between the
// declaration and its reading back ErrNotFound; and ErrContended if other
// clients changed the schedule at each of the server's tries: nothing was
// done, retry (the message ends with the server's Retry-After).
func (c *Client) DeclareRecurring(ctx context.Context, r Recurring) (RecurringInfo, error) {
	path := recurringPath(r.Name)
	if r.Name == "" {
		return RecurringInfo{}, invalid("PUT", path, "the schedule's name is empty")
	}
	if r.Every%time.Millisecond != 0 {
		return RecurringInfo{}, invalid("PUT", path, fmt.Sprintf("every %v is not a whole number of milliseconds", r.Every))
	}
	b := recurringBody{Topic: r.Topic, Cron: r.Cron, EveryMs: r.Every.Milliseconds(), TimeZone: r.TimeZone,
		PayloadBase64: r.Payload, Headers: r.Headers, MaxAttempts: r.MaxAttempts, Missed: r.Missed, MaxMissed: r.MaxMissed}
	if !r.Start.IsZero() {
		b.Start = &r.Start
	}
	if !r.End.IsZero() {
		b.End = &r.End
	}
	var out recurringReply
	if err := c.do(ctx, "PUT", path, b, &out); err != nil {
		return RecurringInfo{}, err
	}
	if !out.valid() {
		return RecurringInfo{}, malformed("PUT", path, "has no schedule name, topic, missed or next")
	}
	return out.info(), nil
}

// Recurrings lists the recurring schedules of the topics the token may
// produce to or administer, with their next slots and the job of their
// latest slot whose time came; none is an empty list.
func (c *Client) Recurrings(ctx context.Context) ([]RecurringInfo, error) {
	var out struct {
		Recurring *[]recurringReply `json:"recurring"`
	}
	if err := c.do(ctx, "GET", "/v1/recurring", nil, &out); err != nil {
		return nil, err
	}
	if out.Recurring == nil {
		return nil, malformed("GET", "/v1/recurring", "has no recurring list")
	}
	list := make([]RecurringInfo, 0, len(*out.Recurring))
	for _, r := range *out.Recurring {
		if !r.valid() {
			return nil, malformed("GET", "/v1/recurring", "has a schedule without name, topic, missed or next")
		}
		list = append(list, r.info())
	}
	return list, nil
}

// RemoveRecurring removes the recurring schedule name and its stored
// slots still to come. ErrNotFound if there is none; ErrForbidden without
// the produce right on its topic; ErrContended if other clients changed
// it at each of the server's tries (nothing was done: retry). An empty
// name is ErrInvalid, without a request.
func (c *Client) RemoveRecurring(ctx context.Context, name string) error {
	path := recurringPath(name)
	if name == "" {
		return invalid("DELETE", path, "the schedule's name is empty")
	}
	return c.do(ctx, "DELETE", path, nil, nil)
}

func recurringPath(name string) string {
	return "/v1/recurring/" + segment(name)
}

// invalid is the ErrInvalid of a request refused before it is sent.
func invalid(method, path, why string) error {
	return &apierr.Error{Code: apierr.Invalid, Message: fmt.Sprintf("wheelq client: %s %s: %s", method, path, why)}
}

// checkTTR refuses a TTR that is not 0 but is 0 in whole milliseconds,
// which the API would take for its default.
func checkTTR(method, path string, ttr time.Duration) error {
	if ttr != 0 && ttr.Milliseconds() == 0 {
		return invalid(method, path, fmt.Sprintf("ttr %v is under a millisecond (0 is the default)", ttr))
	}
	return nil
}

func jobPath(topic, id string) string {
	return "/v1/jobs/" + segment(topic) + "/" + segment(id)
}

// segment escapes s as one path segment. url.PathEscape leaves "." and
// ".." as they are, which the server refuses as dot segments (no_route),
// and which a proxy may resolve away; their dots are escaped (%2E), which
// the server decodes back to the topic or id.
func segment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

// do sends a request and decodes its reply into out (nil: any body is
// ignored). Only a 2xx is success; with out set, its body must be the JSON
// expected, else the error names the method and path. A reply that is not
// the server's JSON error is mapped by its status (replyError).
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	return c.send(ctx, 0, method, path, body, out)
}

// send is do for a request the server may hold for up to wait (a long
// poll) before it answers. With a wait and an http.Client Timeout, the
// request goes through a shallow copy of c.HTTP without Timeout (the same
// Transport, Jar and CheckRedirect), under a context deadline of Timeout
// + wait, which bounds, as Timeout does, the redirects and the reading of
// the body too.
func (c *Client) send(ctx context.Context, wait time.Duration, method, path string, body, out any) error {
	hc, timeout := c.httpClient(wait > 0)
	parent, bound := ctx, ""
	if limit, ok := waitBound(timeout, wait); ok && wait > 0 {
		bound = boundText(timeout, wait)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	// wrap names the request in err, and what bounded it if that was
	// Timeout + wait rather than the caller's context.
	wrap := func(err error) error {
		if bound != "" && ctx.Err() != nil && parent.Err() == nil {
			return fmt.Errorf("wheelq client: %s %s: %s: %w", method, path, bound, err)
		}
		return fmt.Errorf("wheelq client: %s %s: %w", method, path, err)
	}
	req, err := c.newRequest(ctx, method, path, body)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() == nil && notSent(err) {
			return fmt.Errorf("wheelq client: %s %s: %w: %w", method, path, ErrUnavailable, err)
		}
		return wrap(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return wrap(err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return replyError(method, path, resp, b)
	}
	if out == nil {
		return nil
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return fmt.Errorf("wheelq client: %s %s: %s with an empty body", method, path, resp.Status)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("wheelq client: %s %s: %s with a body that is not the reply expected: %w", method, path, resp.Status, err)
	}
	return nil
}

// maxReply bounds the bytes of a reply read (MaxStreamLine the bytes of
// one line of a stream).
const maxReply = 64 << 20

// httpClient is the http.Client to send through, and the Timeout it had.
// With untimed, a client with a Timeout is replaced by a shallow copy
// without it (the same Transport, Jar and CheckRedirect): the caller
// bounds the request itself (waitBound), the redirects and the reading of
// the body included, as Timeout does.
func (c *Client) httpClient(untimed bool) (*http.Client, time.Duration) {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{}
	}
	timeout := hc.Timeout
	if untimed && timeout > 0 {
		cp := *hc
		cp.Timeout = 0
		hc = &cp
	}
	return hc, timeout
}

// waitBound is the bound of a request the server may hold for wait:
// timeout + wait, if there is a timeout. A sum past time.Duration's range
// leaves the wait to the caller's context and to the server, which
// refuses a wait past its http.max_wait.
func waitBound(timeout, wait time.Duration) (time.Duration, bool) {
	limit := timeout + wait
	return limit, timeout > 0 && limit > wait
}

// boundText says, in an error, that a waitBound passed.
func boundText(timeout, wait time.Duration) string {
	return fmt.Sprintf("the client's Timeout %v + the wait %v passed", timeout, wait)
}

// newRequest is a request of the API with body (nil: none) as JSON.
func (c *Client) newRequest(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		// Without HTML escaping: '<', '>' and '&' take one byte each, not
		// six, against the server's limits on bodies.
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(body); err != nil {
			return nil, err
		}
		rd = &buf
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// malformed is the error of a 2xx reply that decoded but lacks what it
// must hold.
func malformed(method, path, what string) error {
	return fmt.Errorf("wheelq client: %s %s: the reply %s", method, path, what)
}

// notSent says err is a failure to connect (refused, no route, a failed
// dial): the request was not sent, so nothing was applied.
func notSent(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// replyError is the error of a reply that is not a 2xx. The server's JSON
// error is returned as it is (*apierr.Error), its message ending with the
// reply's Retry-After, if any (the server sends "1" with unavailable,
// contended and outcome_unknown). Any other reply (a proxy's
// plain or HTML page, a redirect) is mapped by status where that is safe:
// 503 is ErrUnavailable (nothing was done; its Retry-After, if any, is in
// the message); 502 and 504 are ErrUnavailable for a GET, which changes
// nothing, and ErrOutcomeUnknown for any other method, since the proxy
// may have passed the write on before it failed. Every other status
// matches no sentinel.
func replyError(method, path string, resp *http.Response, b []byte) error {
	var e struct {
		Error *apierr.Error `json:"error"`
	}
	ra := ""
	if h := resp.Header.Get("Retry-After"); h != "" {
		ra = " (Retry-After " + h + ")"
	}
	if json.Unmarshal(b, &e) == nil && e.Error != nil && e.Error.Code != "" {
		e.Error.Message += ra
		return e.Error
	}
	msg := fmt.Sprintf("%s %s: %s, not the wheelq server's reply", method, path, resp.Status) + ra
	code := apierr.Code("")
	switch resp.StatusCode {
	case http.StatusServiceUnavailable:
		code = apierr.Unavailable
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		code = apierr.OutcomeUnknown
		if method == http.MethodGet || method == http.MethodHead {
			code = apierr.Unavailable
		}
	}
	if code == "" {
		return errors.New("wheelq client: " + msg)
	}
	return &apierr.Error{Code: code, Message: "wheelq client: " + msg}
}
