package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/wheelq/wheelq/server/apierr"
)

// MaxStreamLine is the most bytes ReserveStream reads of one line of the
// stream (64 MiB, the bound on a whole Reserve reply): a longer line
// ends the stream with an error matching bufio.ErrTooLong, read no
// further. A job's line is its payload (up to six bytes a byte once
// escaped, four thirds in base64), headers and fields.
const MaxStreamLine = maxReply

const streamPath = "/v1/reserve/stream"

// ReserveStream reserves jobs of r.Topics as they come due, for up to
// r.Wait, and calls fn with each one the moment it arrives, in the order
// the server reserved them, on the calling goroutine: the lowest-latency
// way to consume (POST /v1/reserve/stream: no gap between polls). A
// stream reserves at most r.Max jobs (0: 1) and then ends, so that no
// more than r.Max are reserved and not yet handed to fn; ReserveStream
// then opens another for what is left of r.Wait (one request per r.Max
// jobs). r.TTR is each job's time-to-run, as for Reserve; r.Wait 0 hands
// over up to r.Max of the jobs due now and ends.
//
// It returns nil once r.Wait has passed, or when the server stopped,
// which ends open streams early (call again: a server gone answers
// ErrUnavailable). Otherwise it returns at the first of:
//   - fn's error, as it is (errors.Is and == hold);
//   - ctx's end: an error matching ctx.Err(); fn is not called after it;
//   - the server's error, the stream's last line, as the *apierr.Error
//     Reserve would return for it: errors.Is(err, ErrUnauthorized) for a
//     token revoked mid-stream, ErrPaused, ErrUnavailable, ...;
//   - a refused request: the same errors as Reserve's (ErrTopicMode,
//     ErrTooManyWaiters, a proxy's 503 as ErrUnavailable, ...);
//   - a stream cut off (matching io.ErrUnexpectedEOF), a line that is
//     neither a job nor an error (a proxy's page, say), or one past
//     MaxStreamLine (matching bufio.ErrTooLong): an error naming the
//     route, and the line.
//
// A nil fn, or a TTR under a millisecond but not 0, is ErrInvalid,
// without a request.
//
// The jobs handed to fn are the caller's to ack, nack or touch. The
// server writes each job as soon as it reserves it, not when fn asks:
// while fn runs, up to r.Max jobs coming due meanwhile are reserved and
// wait in the connection's buffers, their TTR running. When ReserveStream
// returns early (fn's error, ctx) it closes the connection: the jobs the
// server had written and fn was not given (at most r.Max) stay reserved
// until their TTR lapses (the attempt then counts as failed). Choose
// r.Max as the jobs fn can work through within their TTR.
//
// The Timeout of c.HTTP does not cut the stream short: the stream is
// bounded by that Timeout + r.Wait instead (and by ctx), not counting the
// time spent in fn; past that bound the error matches
// context.DeadlineExceeded.
func (c *Client) ReserveStream(ctx context.Context, r Reserve, fn func(Reservation) error) error {
	const method, path = "POST", streamPath
	if fn == nil {
		return invalid(method, path, "no function to hand the jobs to")
	}
	if err := checkTTR(method, path, r.TTR); err != nil {
		return err
	}
	most := max(r.Max, 1)
	end := time.Now().Add(r.Wait)
	for {
		n, err := c.stream(ctx, r, fn)
		if err != nil || n < most || r.Wait <= 0 {
			return err // the wait passed, the server stopped, or an error
		}
		// The stream ended with its Max: the server reserves no more on
		// one stream than it was asked for. Another, for what is left of
		// the wait.
		left := time.Until(end)
		if left < time.Millisecond {
			return nil
		}
		r.Wait = left
	}
}

// stream is one POST /v1/reserve/stream of ReserveStream, which checked
// r and fn; n is the number of jobs handed to fn.
func (c *Client) stream(ctx context.Context, r Reserve, fn func(Reservation) error) (n int, err error) {
	const method, path = "POST", streamPath
	hc, timeout := c.httpClient(true)
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var bound *pausableBound
	var boundErr error
	if limit, ok := waitBound(timeout, r.Wait); ok {
		boundErr = fmt.Errorf("%s: %w", boundText(timeout, r.Wait), context.DeadlineExceeded)
		bound = startBound(limit, func() { cancel(boundErr) })
		defer bound.stop()
	}
	// fail names the request in err, or says what ended it: ctx, or the
	// bound.
	fail := func(err error) error {
		if ctx.Err() != nil {
			err = ctx.Err()
			if cause := context.Cause(ctx); cause != err {
				err = fmt.Errorf("%w (%w)", err, cause)
			}
		} else if boundErr != nil && context.Cause(sctx) == boundErr {
			err = boundErr
		}
		return fmt.Errorf("wheelq client: %s %s: %w", method, path, err)
	}
	req, err := c.newRequest(sctx, method, path, reserveBody(r))
	if err != nil {
		return n, err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := hc.Do(req)
	if err != nil {
		if sctx.Err() == nil && notSent(err) {
			return n, fmt.Errorf("wheelq client: %s %s: %w: %w", method, path, ErrUnavailable, err)
		}
		return n, fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil && sctx.Err() != nil {
			return n, fail(err)
		}
		if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
			return n, fmt.Errorf("wheelq client: %s %s: %s, not the wheelq server's stream (200)", method, path, resp.Status)
		}
		return n, replyError(method, path, resp, b)
	}
	// malformed says what is wrong with line n, and what the reply was.
	malformed := func(n int, what string, err error) error {
		ct := resp.Header.Get("Content-Type")
		if ct == "" {
			ct = "no Content-Type"
		}
		if err != nil {
			return fmt.Errorf("wheelq client: %s %s: line %d of the reply (%s, %s) %s: %w", method, path, n, resp.Status, ct, what, err)
		}
		return fmt.Errorf("wheelq client: %s %s: line %d of the reply (%s, %s) %s", method, path, n, resp.Status, ct, what)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var line []byte
	for lineNo := 1; ; lineNo++ {
		line = line[:0]
		for {
			frag, err := br.ReadSlice('\n')
			if len(line)+len(frag) > MaxStreamLine {
				return n, malformed(lineNo, fmt.Sprintf("is longer than MaxStreamLine (%d bytes)", MaxStreamLine), bufio.ErrTooLong)
			}
			line = append(line, frag...)
			if err == nil {
				break
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err == io.EOF {
				if len(bytes.TrimSpace(line)) == 0 {
					return n, nil // the end of the stream
				}
				return n, malformed(lineNo, fmt.Sprintf("is cut off: the stream ended after %d bytes of it, without a newline", len(line)), io.ErrUnexpectedEOF)
			}
			return n, fail(err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var got struct {
			Reservation
			Error *apierr.Error `json:"error"`
		}
		if err := json.Unmarshal(line, &got); err != nil {
			return n, malformed(lineNo, "is not a job nor an error", err)
		}
		if got.Error != nil {
			if got.Error.Code == "" {
				return n, malformed(lineNo, "is an error without a code", nil)
			}
			return n, got.Error
		}
		if got.Topic == "" || got.ID == "" || got.Token == "" {
			return n, malformed(lineNo, "is not a job nor an error: it has no topic, id or token", nil)
		}
		if bound != nil {
			bound.pause()
		}
		if ctx.Err() != nil {
			return n, fail(ctx.Err())
		}
		if err := fn(got.Reservation); err != nil {
			return n, err
		}
		n++
		if bound != nil {
			bound.resume()
		}
	}
}

// reserveBody is the API's body of a Reserve.
func reserveBody(r Reserve) map[string]any {
	return map[string]any{"topics": r.Topics, "max": r.Max, "ttr_ms": r.TTR.Milliseconds(), "wait_ms": r.Wait.Milliseconds()}
}

// pausableBound runs its func once left has passed, not counting the
// time it is paused. Its only goroutine is the timer's, which runs the
// func and ends; stop stops the timer.
type pausableBound struct {
	mu    sync.Mutex
	t     *time.Timer
	left  time.Duration
	since time.Time
	fired bool
}

func startBound(d time.Duration, f func()) *pausableBound {
	b := &pausableBound{left: d, since: time.Now()}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.t = time.AfterFunc(d, func() {
		b.mu.Lock()
		b.fired = true
		b.mu.Unlock()
		f()
	})
	return b
}

// pause stops the clock (if it has not run out).
func (b *pausableBound) pause() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.fired {
		if b.t.Stop() {
			b.left -= time.Since(b.since)
		} else {
			b.fired = true // or firing: its func waits for mu
		}
	}
}

// resume starts the clock again with what was left.
func (b *pausableBound) resume() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.fired {
		b.since = time.Now()
		b.t.Reset(max(b.left, 0))
	}
}

func (b *pausableBound) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.t.Stop()
}
