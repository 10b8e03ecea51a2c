// Package push delivers a topic's due jobs as HTTP POSTs: the job's
// payload as the body, signed as Standard Webhooks signs (headers
// webhook-id, webhook-timestamp, webhook-signature: "v1," and the base64
// HMAC-SHA256 of "id.timestamp.body" under the secret), so receivers can
// use an existing verifier. A 2xx reply acks the job; anything else, a
// redirect, a timeout or a refused connection is a failed attempt, retried
// by the topic's backoff (Target.Backoff) or else the queue's (a
// Retry-After on the reply, seconds or an HTTP date, is honoured up to
// MaxRetryAfter) and dead-lettered after its last attempt.
package push

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/internal/redact"
)

// ErrNotAllowed is a target host outside the allow-list.
var ErrNotAllowed = errors.New("push: target host not allowed")

// Headers the deliverer sets besides the signature's.
const (
	HeaderTopic   = "Wheelq-Topic"
	HeaderID      = "Wheelq-Id"
	HeaderAttempt = "Wheelq-Attempt"
	// HeaderHeaders carries the job's headers as a JSON object.
	HeaderHeaders = "Wheelq-Headers"
)

// maxIdlePerHost is how many idle connections a deliverer keeps to its
// receiver: as many as pushes may run at once (Config.Concurrency's
// default, 64), and some (net/http's default Transport keeps 2 per host,
// and most pushes to one receiver dialled anew).
const maxIdlePerHost = 128

// Target is where a topic's jobs go.
type Target struct {
	// URL is where the jobs are posted. It is printed (in errors, hence
	// in a job's last error and the log) with its query's values and any
	// password masked: a receiver's token may go in the query.
	URL *url.URL
	// Secret is the signing secret: "whsec_" and base64.
	Secret  string
	Timeout time.Duration
	// Backoff, if not nil, is the delay before the next try after failed
	// attempt n (1 for the first run), instead of the queue's backoff; a
	// receiver's Retry-After wins over both.
	Backoff func(attempt int) time.Duration
}

// Exponential is a Target.Backoff: base after the first failed attempt,
// doubling per attempt up to most (1h when 0), each scaled by a random
// factor in [0.75, 1.25) so that pushes that failed together do not all
// come back together.
func Exponential(base, most time.Duration) func(attempt int) time.Duration {
	if most <= 0 {
		most = time.Hour
	}
	return func(attempt int) time.Duration {
		d := most
		if n := max(attempt-1, 0); n < 40 && base<<n > 0 && base<<n < most {
			d = base << n
		}
		return time.Duration(float64(d) * (0.75 + 0.5*rand.Float64()))
	}
}

// Deliverer is the wheelq.Handler of one pushed topic.
type Deliverer struct {
	t Target
	// where is t.URL as printed (errors, a job's last error, the log):
	// its query's values masked, as a receiver's token may be one.
	where string
	key   []byte
	conns *poster
	clock func() time.Time
	// running counts the pushes under way (Running).
	running atomic.Int64
}

// Running is how many of the deliverer's pushes are under way.
func (d *Deliverer) Running() int { return int(d.running.Load()) }

// New checks t against the allowed hosts (host:port as in the URL) and
// returns its deliverer. Pushes go straight to the target (no proxy from
// the environment: the allow-list names where they go), over HTTP/1.1
// connections kept for the next push.
func New(t Target, allow []string) (*Deliverer, error) {
	if t.URL == nil || (t.URL.Scheme != "http" && t.URL.Scheme != "https") {
		return nil, fmt.Errorf("push: target %s: want an http(s) URL", redact.URL(t.URL))
	}
	if t.URL.User != nil {
		return nil, fmt.Errorf("push: target %s: credentials in the URL: a push sends none; the receiver checks the webhook-signature instead", redact.URL(t.URL))
	}
	if !slices.Contains(allow, t.URL.Host) {
		return nil, fmt.Errorf("%w: %s (allowed: %v)", ErrNotAllowed, t.URL.Host, allow)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(t.Secret, "whsec_"))
	if err != nil || !strings.HasPrefix(t.Secret, "whsec_") || len(key) < 16 {
		return nil, errors.New("push: secret: want whsec_ then the base64 of at least 16 bytes")
	}
	port := t.URL.Port()
	var tc *tls.Config
	switch {
	case t.URL.Scheme == "https":
		tc = &tls.Config{ServerName: t.URL.Hostname(), NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
		if port == "" {
			port = "443"
		}
	case port == "":
		port = "80"
	}
	return &Deliverer{t: t, where: redact.URL(t.URL), key: key, conns: newPoster(net.JoinHostPort(t.URL.Hostname(), port), tc), clock: time.Now}, nil
}

// Close closes the connections kept for the next push. Pushes still
// running close theirs as they end; a push after Close dials anew and
// keeps nothing.
func (d *Deliverer) Close() { d.conns.close() }

// Sign returns the webhook-signature header's value for id, the unix
// timestamp ts and body under secret key.
func Sign(key []byte, id string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%d.", id, ts)
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Verify checks a request's signature headers against key, within
// tolerance of now: what a receiver does.
func Verify(key []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	ts, err := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
	if err != nil {
		return errors.New("push: no or bad webhook-timestamp")
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return errors.New("push: timestamp outside the tolerance")
	}
	want := Sign(key, h.Get("webhook-id"), ts, body)
	for sig := range strings.FieldsSeq(h.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return errors.New("push: no matching signature")
}

// MessageID is the webhook-id of a job's attempt: a receiver that has
// seen it may skip it (a run repeated after a crash carries the same).
func MessageID(j *wheelq.Job) string {
	return fmt.Sprintf("%s/%s/%d", url.PathEscape(j.Topic), url.PathEscape(j.ID), j.Attempt)
}

// HandleJob posts the job.
func (d *Deliverer) HandleJob(ctx context.Context, j *wheelq.Job) error {
	d.running.Add(1)
	defer d.running.Add(-1)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.t.URL.String(), bytes.NewReader(j.Payload))
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which it prints whole
		}
		return wheelq.Permanent(fmt.Errorf("push to %s: %w", d.where, err))
	}
	id := MessageID(j)
	ts := d.clock().Unix()
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", Sign(d.key, id, ts, j.Payload))
	req.Header.Set(HeaderTopic, j.Topic)
	req.Header.Set(HeaderID, j.ID)
	req.Header.Set(HeaderAttempt, strconv.Itoa(j.Attempt))
	if len(j.Headers) > 0 {
		b, _ := json.Marshal(j.Headers)
		req.Header.Set(HeaderHeaders, string(b))
	}
	if d.t.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.t.Timeout)
		defer cancel()
	}
	r, err := d.conns.post(ctx, req)
	if err != nil {
		return d.retry(j, fmt.Errorf("push to %s: %w", d.where, bound(err)))
	}
	if r.status >= 200 && r.status < 300 {
		return nil
	}
	err = fmt.Errorf("push to %s: %s", d.where, strings.TrimSpace(strconv.Itoa(r.status)+" "+http.StatusText(r.status)))
	if after, ok := retryAfter(r.retryAfter, time.Now()); ok {
		return wheelq.RetryAfter(after, err)
	}
	return d.retry(j, err)
}

// MaxRetryAfter bounds a receiver's Retry-After: a push is tried again
// at most this long after the receiver asked for more.
const MaxRetryAfter = 24 * time.Hour

// retryAfter reads a Retry-After header (seconds, or an HTTP date, RFC
// 9110), bounded by MaxRetryAfter; ok is false when there is none, or it
// does not parse, or asks for no wait.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseUint(v, 10, 64); err == nil {
		if s == 0 {
			return 0, false
		}
		return time.Duration(min(s, uint64(MaxRetryAfter/time.Second))) * time.Second, true
	} else if errors.Is(err, strconv.ErrRange) {
		return MaxRetryAfter, true // all digits, past uint64
	}
	t, err := http.ParseTime(v)
	if err != nil || !t.After(now) {
		return 0, false
	}
	return min(t.Sub(now), MaxRetryAfter), true
}

// retry is a failed attempt's error: retried after the topic's backoff,
// if it has one (else the queue's).
func (d *Deliverer) retry(j *wheelq.Job, err error) error {
	if d.t.Backoff == nil {
		return err
	}
	return wheelq.RetryAfter(d.t.Backoff(j.Attempt), err)
}
