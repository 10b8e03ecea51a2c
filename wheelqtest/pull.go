package wheelqtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/persist"
)

// reserveWait bounds, in real time, how long Reserve waits for jobs: on
// the fake clock, jobs come due only when the test advances it.
const reserveWait = 200 * time.Millisecond

// Reserve takes up to opts.Max due jobs of pulled topics (Options.Pull)
// from the current incarnation, as wheelq.Queue.Reserve does, without
// blocking: it returns nil, nil when none is due (advance the clock). Each
// reservation is recorded as a run of its job (History, Check) that ends
// when Ack or Nack stores its outcome; one left alone lapses at its
// deadline (advance past it) and the job comes back. A crash armed at
// AfterReserve makes it fail with ErrCrashed.
func (h *Harness) Reserve(opts wheelq.ReserveOptions) ([]*wheelq.Reservation, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	q, inc := h.q, h.incarnation
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), reserveWait)
	defer cancel()
	rs, err := q.Reserve(ctx, opts)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range rs {
		h.seq++
		key := persist.JobKey(r.Topic, r.ID)
		h.runsByKey[key] = append(h.runsByKey[key], len(h.runs))
		h.runs = append(h.runs, Run{
			Topic: r.Topic, ID: r.ID, Attempt: r.Job.Attempt, Due: r.Job.Due, Start: h.clock.Wall(),
			Payload: bytes.Clone(r.Job.Payload), Incarnation: inc, startSeq: h.seq,
		})
	}
	return rs, nil
}

// Ack acks a reservation through the current incarnation
// (wheelq.Queue.Ack) and ends its run as a success.
func (h *Harness) Ack(r *wheelq.Reservation) error {
	return h.resolve(r, nil, func(ctx context.Context, q *wheelq.Queue) error { return q.Ack(ctx, r.Receipt) })
}

// Nack nacks a reservation (wheelq.Queue.Nack) and ends its run as a
// failure with opts.Err.
func (h *Harness) Nack(r *wheelq.Reservation, opts wheelq.NackOptions) error {
	cause := opts.Err
	if cause == nil {
		cause = errors.New("nacked")
	}
	return h.resolve(r, cause, func(ctx context.Context, q *wheelq.Queue) error { return q.Nack(ctx, r, opts) })
}

// resolve runs call on the current incarnation and, if it applied, ends
// r's run with err.
func (h *Harness) resolve(r *wheelq.Reservation, err error, call func(context.Context, *wheelq.Queue) error) error {
	if r == nil {
		return fmt.Errorf("%w: nil reservation", wheelq.ErrInvalidOption)
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	q := h.q
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.Timeout)
	defer cancel()
	if cerr := call(ctx, q); cerr != nil {
		return cerr
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	is := h.runsByKey[persist.JobKey(r.Topic, r.ID)]
	for k := len(is) - 1; k >= 0; k-- {
		run := &h.runs[is[k]]
		if !run.Done && run.Attempt == r.Job.Attempt {
			h.seq++
			run.End, run.endSeq, run.Err, run.Done = h.clock.Wall(), h.seq, err, true
			break
		}
	}
	return nil
}
