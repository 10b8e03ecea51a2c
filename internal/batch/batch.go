// Package batch is group commit, with nothing of Redis in it: a Batcher
// sends concurrent callers' requests in shared round trips and hands each
// its result; a Retrier queues items without waiting and sends them in
// batches, retrying a failed batch until it succeeds or is abandoned. The
// store's calls are its round trips.
package batch

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by a Batcher or Retrier that has been closed.
var ErrClosed = errors.New("wheelq: closed")

// Config configures group commit. A zero field means its default.
type Config struct {
	// MaxBatch is the most requests sent in one round trip. Default 256.
	MaxBatch int
	// Linger is how long a batch waits for more requests once the first
	// has come and fewer than MaxBatch are waiting (a Retrier lingers only
	// while items come faster than one per Linger, and not once closed). Default 0: a batch takes what is queued, and
	// batches grow on their own while the previous round trips are in
	// flight.
	Linger time.Duration
	// InFlight is the most round trips of batches in flight at once (a
	// lone request sent directly, see Batcher.Do, comes on top). Default 2.
	InFlight int
	// Timeout bounds one round trip. Default 5s.
	Timeout time.Duration
	// CallContext, if set, gives a Retrier the context of each round trip
	// (one at a time) instead of context.WithTimeout(Timeout), and end is
	// called once the round trip returned: the queue hands it a context
	// reused from call to call, which costs no timer and no allocation.
	CallContext func() (ctx context.Context, end func())
}

func (c *Config) fill() {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 256
	}
	if c.InFlight <= 0 {
		c.InFlight = 2
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
}

// maxYields bounds how many times a flusher yields to let requests come
// before it sends a batch.
const maxYields = 8

// shareWait bounds how long a flusher waits for its share of the
// outstanding requests (see fill). It waits only for a share of at least
// minShare: with few callers a round trip more costs less than the wait
// (the callers it waits for are often in the other round trip, and an
// idle process's timers fire late).
const (
	shareWait = 200 * time.Microsecond
	minShare  = 8
)

type call[T, R any] struct {
	req  T
	res  R
	err  error
	done chan struct{}
}

// Batcher gathers concurrent requests into batches and runs each batch with
// one call of exec (one Redis round trip), handing every caller its own
// result. It owns InFlight flushing goroutines, started by the first
// request that needs them, each of which takes a request, adds what else
// is queued, and runs the batch; Stop stops them.
// While every flusher is busy, requests queue up, so batches grow with the
// load on their own. A lone request skips the flushers (see Do).
type Batcher[T, R any] struct {
	cfg  Config
	exec func(ctx context.Context, reqs []T) ([]R, error)
	in   chan *call[T, R]
	pool sync.Pool

	mu     sync.RWMutex // guards closed against sends on in
	closed bool
	wg     sync.WaitGroup
	start  sync.Once // starts the flushers

	// outstanding counts the requests not yet answered; peak is about the
	// most of them there recently were at once (it decays with each batch,
	// and falls back to outstanding after a millisecond without one).
	outstanding, peak atomic.Int64
	lastFlush         atomic.Int64 // unix ns
}

// NewBatcher returns a batcher; it starts no goroutine until a request
// needs one. exec must return one result per request, or
// an error that every request of the batch then gets; it must not keep the
// slice of requests it is given (the batcher reuses it).
func NewBatcher[T, R any](cfg Config, exec func(ctx context.Context, reqs []T) ([]R, error)) *Batcher[T, R] {
	cfg.fill()
	b := &Batcher[T, R]{
		cfg:  cfg,
		exec: exec,
		in:   make(chan *call[T, R], cfg.MaxBatch*cfg.InFlight),
	}
	b.pool.New = func() any { return &call[T, R]{done: make(chan struct{}, 1)} }
	return b
}

// startFlushers starts the flushers, once. The caller holds mu (read), so
// Stop cannot have begun.
func (b *Batcher[T, R]) startFlushers() {
	b.start.Do(func() {
		for range b.cfg.InFlight {
			b.wg.Go(b.flusher)
		}
	})
}

// Do submits req and waits for its result. If ctx ends first, Do returns
// ctx.Err(), but the request may still be carried out.
//
// A lone request (none other outstanding, and no others lately) is sent
// at once from the caller's goroutine, bounded by ctx and Timeout: there
// is nothing to gather it with, and handing it to a flusher and its
// result back would cost two goroutine wake-ups (half again a loopback
// round trip on a 2-core VM).
func (b *Batcher[T, R]) Do(ctx context.Context, req T) (R, error) {
	var zero R
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return zero, ErrClosed
	}
	if b.peak.Load() <= 1 && b.outstanding.CompareAndSwap(0, 1) {
		b.peak.Store(max(b.peak.Load(), 1))
		b.wg.Add(1) // Stop waits for it as for a flusher
		b.mu.RUnlock()
		defer b.wg.Done()
		defer b.outstanding.Add(-1)
		return b.direct(ctx, req)
	}
	if err := ctx.Err(); err != nil {
		b.mu.RUnlock()
		return zero, err // sends nothing (a select of two ready cases picks at random)
	}
	b.startFlushers()
	c := b.pool.Get().(*call[T, R])
	c.req = req
	if n := b.outstanding.Add(1); n > b.peak.Load() {
		b.peak.Store(n) // racy max: good enough for a batching target
	}
	select {
	case b.in <- c:
		b.mu.RUnlock()
	case <-ctx.Done():
		b.mu.RUnlock()
		b.outstanding.Add(-1)
		b.pool.Put(c)
		return zero, ctx.Err()
	}
	select {
	case <-c.done:
		res, err := c.res, c.err
		*c = call[T, R]{done: c.done}
		b.pool.Put(c)
		return res, err
	case <-ctx.Done():
		return zero, ctx.Err() // c is abandoned to the flusher and the GC
	}
}

// DoAll submits reqs, as Do would each, and waits for their results: the
// i-th result and error are reqs[i]'s. They go to the flushers with the
// other callers' requests, in one batch or several (a batch's error is its
// requests' only), so that many callers' small sets share round trips.
// If ctx ends first, the requests not yet answered get ctx.Err(), but they
// may still be carried out.
func (b *Batcher[T, R]) DoAll(ctx context.Context, reqs []T) ([]R, []error) {
	res, errs := make([]R, len(reqs)), make([]error, len(reqs))
	calls := make([]*call[T, R], 0, len(reqs))
	fail := func(from int, err error) {
		for i := from; i < len(reqs); i++ {
			errs[i] = err
		}
	}
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		fail(0, ErrClosed)
		return res, errs
	}
	b.startFlushers()
	if n := b.outstanding.Add(int64(len(reqs))); n > b.peak.Load() {
		b.peak.Store(n)
	}
send:
	for i, req := range reqs {
		if ctx.Err() != nil {
			// A select with both cases ready picks one at random: an
			// ended ctx sends nothing more.
			b.outstanding.Add(-int64(len(reqs) - i))
			fail(i, ctx.Err())
			break
		}
		c := b.pool.Get().(*call[T, R])
		c.req = req
		select {
		case b.in <- c:
			calls = append(calls, c)
		case <-ctx.Done():
			b.outstanding.Add(-int64(len(reqs) - i))
			b.pool.Put(c)
			fail(i, ctx.Err())
			break send
		}
	}
	b.mu.RUnlock()
	for i, c := range calls {
		select {
		case <-c.done:
			res[i], errs[i] = c.res, c.err
			*c = call[T, R]{done: c.done}
			b.pool.Put(c)
		case <-ctx.Done():
			fail(i, ctx.Err()) // the rest are abandoned to the flushers and the GC
			return res, errs
		}
	}
	return res, errs
}

// direct runs a lone request as a batch of its own.
func (b *Batcher[T, R]) direct(ctx context.Context, req T) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	one := [1]T{req}
	res, err := b.exec(ctx, one[:])
	if err == nil && len(res) != 1 {
		err = errors.New("persist: batch returned a wrong number of results")
	}
	if err != nil {
		return zero, err
	}
	return res[0], nil
}

func (b *Batcher[T, R]) flusher() {
	batch := make([]*call[T, R], 0, b.cfg.MaxBatch)
	reqs := make([]T, 0, b.cfg.MaxBatch) // reused: exec must not keep it
	for {
		first, ok := <-b.in
		if !ok {
			return
		}
		batch = b.fill(append(batch[:0], first))
		b.flush(batch, reqs[:0])
		clear(batch)
		clear(reqs[:len(batch)])
	}
}

// fill adds queued requests to batch, waiting up to Linger for more. It
// also waits, up to shareWait, until the batch holds its share of the
// requests recently outstanding at once (peak / InFlight, when that is at
// least minShare): the round
// trips then carry even batches. (Without it a few callers end up alone
// in one batch and the rest in another, and each round trip costs the
// same fixed price in system calls on both sides, whatever it carries.)
// Before it waits, it yields the processor while that brings requests:
// the callers that a round trip just answered are runnable, and each is
// about to send its next request.
func (b *Batcher[T, R]) fill(batch []*call[T, R]) []*call[T, R] {
	if time.Now().UnixNano()-b.lastFlush.Load() > int64(time.Millisecond) {
		b.peak.Store(b.outstanding.Load()) // a lull: the old peak is gone
	}
	share := int((b.peak.Load() + int64(b.cfg.InFlight) - 1) / int64(b.cfg.InFlight))
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	yields := 0
	for len(batch) < b.cfg.MaxBatch {
		select {
		case c, ok := <-b.in:
			if !ok {
				return batch
			}
			batch = append(batch, c)
			continue
		default:
		}
		if yields < maxYields {
			runtime.Gosched()
			yields++
			if len(b.in) > 0 {
				continue
			}
			yields = maxYields
		}
		wait := b.cfg.Linger
		if share >= minShare && len(batch) < share {
			wait = max(wait, shareWait)
		}
		if wait <= 0 {
			return batch
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		}
		select {
		case c, ok := <-b.in:
			if !ok {
				return batch
			}
			batch = append(batch, c)
		case <-timer.C:
			return batch
		}
	}
	return batch
}

func (b *Batcher[T, R]) flush(batch []*call[T, R], reqs []T) {
	for _, c := range batch {
		reqs = append(reqs, c.req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.Timeout)
	res, err := b.exec(ctx, reqs)
	cancel()
	if err == nil && len(res) != len(batch) {
		err = errors.New("persist: batch returned a wrong number of results")
	}
	if p := b.peak.Load(); p > 0 {
		b.peak.Store(max(b.outstanding.Load(), p-(p+7)/8))
	}
	b.lastFlush.Store(time.Now().UnixNano())
	b.outstanding.Add(-int64(len(batch)))
	for i, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.res = res[i]
		}
		c.done <- struct{}{}
	}
}

// Stop stops taking requests, finishes the queued ones and waits for the
// batcher's goroutines. Stop without a start, Stop after Stop and Stops
// from several goroutines at once are safe.
func (b *Batcher[T, R]) Stop() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.in)
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// Retrier is asynchronous group commit for work that must not be lost:
// items are queued without waiting, sent in batches, and a batch that fails
// is retried with backoff until it succeeds or the retrier is closed. It
// owns one goroutine, started by the first Add.
type Retrier[T any] struct {
	cfg     Config
	exec    func(ctx context.Context, items []T) error
	onError func(err error, pending int)

	mu       sync.Mutex
	queue    []T
	closing  bool
	kick     chan struct{}
	closeCh  chan struct{} // closed by Stop: cut a linger short
	stop     chan struct{} // closed to abandon retries
	stopOnce sync.Once
	done     chan struct{}
	sending  int  // items in the batch being sent
	started  bool // the goroutine was started (by the first Add); guarded by mu
}

// reuseQueue bounds, in batches, the array a Retrier keeps for its queue
// once sent: a larger one (a burst's) is let go.
const reuseQueue = 16

// NewRetrier returns a retrier; its goroutine starts with the first Add.
// onError (optional) is told of each failed attempt and how many items
// wait. exec must not keep the slice of items it is given (the retrier
// reuses it).
func NewRetrier[T any](cfg Config, exec func(ctx context.Context, items []T) error, onError func(err error, pending int)) *Retrier[T] {
	cfg.fill()
	r := &Retrier[T]{cfg: cfg, exec: exec, onError: onError,
		kick: make(chan struct{}, 1), closeCh: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	return r
}

// Add queues items. It never blocks on I/O. After Stop it returns
// ErrClosed.
func (r *Retrier[T]) Add(items ...T) error {
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return ErrClosed
	}
	r.queue = append(r.queue, items...)
	if !r.started {
		r.started = true
		go r.loop()
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return nil
}

// Pending returns the number of items not yet sent successfully.
func (r *Retrier[T]) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue) + r.sending
}

func (r *Retrier[T]) loop() {
	defer close(r.done)
	backoff := 10 * time.Millisecond
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	var lastSend time.Time
	var spare []T // the array of the queue taken before, reused: exec must not keep it
	for {
		r.mu.Lock()
		for len(r.queue) == 0 {
			if r.closing {
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
			select {
			case <-r.kick:
			case <-r.stop:
				return
			}
			r.mu.Lock()
		}
		if r.cfg.Linger > 0 && len(r.queue) < r.cfg.MaxBatch && !r.closing && time.Since(lastSend) < 2*r.cfg.Linger {
			// Items come faster than one per Linger: let more come, for
			// fewer, larger round trips and far less garbage per item.
			// (At a slower pace a linger would only delay them, and
			// widen the window in which a crash loses an outcome.)
			r.mu.Unlock()
			linger.Reset(r.cfg.Linger)
			select {
			case <-linger.C:
			case <-r.closeCh:
				linger.Stop()
			case <-r.stop:
				linger.Stop()
				return
			}
			r.mu.Lock()
		}
		lastSend = time.Now()
		// Take the whole queue and give Add the array of the one before:
		// nothing queued is copied, however long a burst's queue grows.
		taken := r.queue
		r.queue = spare[:0]
		r.sending = len(taken)
		r.mu.Unlock()
		for off := 0; off < len(taken); {
			batch := taken[off:min(off+r.cfg.MaxBatch, len(taken))]
			for {
				ctx, cancel := r.callContext()
				err := r.exec(ctx, batch)
				cancel()
				if err == nil {
					backoff = 10 * time.Millisecond
					break
				}
				if r.onError != nil {
					r.onError(err, r.Pending())
				}
				select {
				case <-time.After(backoff):
				case <-r.stop:
					r.mu.Lock()
					r.queue = append(slices.Clone(taken[off:]), r.queue...)
					r.sending = 0
					r.mu.Unlock()
					return
				}
				backoff = min(2*backoff, 2*time.Second)
			}
			off += len(batch)
			r.mu.Lock()
			r.sending = len(taken) - off
			r.mu.Unlock()
		}
		clear(taken)
		if cap(taken) <= reuseQueue*r.cfg.MaxBatch {
			spare = taken[:0] // reused; a burst's huge array is let go
		} else {
			spare = nil
		}
	}
}

// callContext returns the context of a round trip, and what ends it.
func (r *Retrier[T]) callContext() (context.Context, func()) {
	if r.cfg.CallContext != nil {
		return r.cfg.CallContext()
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
	return ctx, cancel
}

// Stop stops taking items and waits until the queued ones are sent or ctx
// ends; then it abandons what is left (returning ctx.Err()) and waits for
// its goroutine. Stop without a start, Stop after Stop and Stops from
// several goroutines at once are safe.
func (r *Retrier[T]) Stop(ctx context.Context) error {
	r.mu.Lock()
	if !r.closing {
		r.closing = true
		close(r.closeCh)
	}
	started := r.started
	r.mu.Unlock()
	if !started {
		return nil // nothing was ever queued
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		r.stopOnce.Do(func() { close(r.stop) })
		<-r.done
		return ctx.Err()
	}
}
