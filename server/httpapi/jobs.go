package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/internal/errmap"
	"github.com/wheelq/wheelq/server/internal/runs"
)

func (a *API) schedule(w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	topic := r.PathValue("topic")
	if err := p.Allow(auth.Produce, topic); err != nil {
		return 0, nil, err
	}
	var req ScheduleRequest
	if err := a.decode(w, r, a.opts.MaxBody, &req); err != nil {
		return 0, nil, err
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	res := a.scheduleOne(ctx, topic, &req)
	if res.Error != nil {
		return 0, nil, res.Error
	}
	return http.StatusCreated, ScheduleResponse{Topic: topic, ID: res.ID, Due: *res.Due}, nil
}

func (a *API) scheduleOne(ctx context.Context, topic string, req *ScheduleRequest) BatchResult {
	res := BatchResult{Topic: topic}
	payload, opts, err := req.options()
	if err == nil {
		now := time.Now()
		res.ID, err = a.q.Schedule(ctx, topic, payload, opts...)
		if err == nil {
			due := req.due(now).Round(time.Microsecond)
			res.Status, res.Due = http.StatusCreated, &due
			return res
		}
	}
	res.Error = a.public(err)
	res.ID = req.ID
	res.Status = res.Error.Code.Status()
	return res
}

// scheduleMany schedules the jobs at the indices idx of jobs with
// ScheduleBatch, and sets their results in out: as if scheduled one at a
// time, in order (runs.Split), in one round trip for each run.
func (a *API) scheduleMany(ctx context.Context, jobs []BatchJob, idx []int, out []BatchResult) {
	var batch []wheelq.BatchJob
	var at []int
	for _, i := range idx {
		j := &jobs[i]
		payload, opts, err := j.options()
		if err != nil {
			e := a.public(err)
			out[i] = BatchResult{Topic: j.Topic, ID: j.ID, Error: e, Status: e.Code.Status()}
			continue
		}
		batch = append(batch, wheelq.BatchJob{Topic: j.Topic, Payload: payload, Options: opts})
		at = append(at, i)
	}
	key := func(k int) string { return runs.Key(jobs[at[k]].Topic, jobs[at[k]].ID) }
	for _, r := range runs.Split(len(batch), wheelq.MaxBatchJobs, key) {
		now := time.Now()
		res, err := a.q.ScheduleBatch(ctx, batch[r[0]:r[1]])
		for k, i := range at[r[0]:r[1]] {
			j := &jobs[i]
			b := BatchResult{Topic: j.Topic}
			e := err
			if e == nil {
				b.ID, e = res[k].ID, res[k].Err
			}
			if e == nil {
				due := j.due(now).Round(time.Microsecond)
				b.Status, b.Due = http.StatusCreated, &due
			} else {
				b.Error, b.ID = a.public(e), j.ID
				b.Status = b.Error.Code.Status()
			}
			out[i] = b
		}
	}
}

// checkBatch checks the size of a batch of n items: 1 to MaxBatch.
func (a *API) checkBatch(n int, what string) error {
	switch {
	case n > a.opts.MaxBatch:
		return apierr.New(apierr.TooLarge, "%d %s: the limit is %d", n, what, a.opts.MaxBatch)
	case n == 0:
		return apierr.New(apierr.Invalid, "no %s", what)
	}
	return nil
}

func (a *API) batch(w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	var req BatchRequest
	if err := a.decode(w, r, a.opts.MaxBatchBody, &req); err != nil {
		return 0, nil, err
	}
	if err := a.checkBatch(len(req.Jobs), "jobs"); err != nil {
		return 0, nil, err
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	out := BatchResponse{Results: make([]BatchResult, len(req.Jobs))}
	var jobs []int // allowed, in order
	for i := range req.Jobs {
		j := &req.Jobs[i]
		if err := p.Allow(auth.Produce, j.Topic); err != nil {
			e := errmap.From(err)
			out.Results[i] = BatchResult{Topic: j.Topic, ID: j.ID, Error: e, Status: e.Code.Status()}
			continue
		}
		jobs = append(jobs, i)
	}
	a.scheduleMany(ctx, req.Jobs, jobs, out.Results)
	for _, res := range out.Results {
		if res.Error != nil {
			out.Failed++
		}
	}
	return http.StatusOK, out, nil
}

func (a *API) get(_ http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	topic, id := r.PathValue("topic"), r.PathValue("id")
	if err := p.AllowAny(topic, auth.Produce, auth.Consume); err != nil {
		return 0, nil, err
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	info, err := a.q.Lookup(ctx, topic, id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, info, nil
}

func (a *API) cancel(_ http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	topic, id := r.PathValue("topic"), r.PathValue("id")
	if err := p.Allow(auth.Produce, topic); err != nil {
		return 0, nil, err
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	return http.StatusNoContent, nil, a.q.Cancel(ctx, topic, id)
}

func (a *API) due(w http.ResponseWriter, r *http.Request) (time.Time, error) {
	var req TimeRequest
	if err := a.decode(w, r, 4<<10, &req); err != nil {
		return time.Time{}, err
	}
	if _, err := req.option(); err != nil {
		return time.Time{}, err
	}
	return req.due(time.Now()), nil
}

func (a *API) reschedule(w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	return a.move(w, r, p, auth.Produce, a.q.Reschedule)
}

func (a *API) requeue(w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	return a.move(w, r, p, auth.Admin, a.q.Requeue)
}

// move gives the path's job a new due time with to (Reschedule or
// Requeue), which needs the permission perm on its topic.
func (a *API) move(w http.ResponseWriter, r *http.Request, p *auth.Principal, perm auth.Perm,
	to func(ctx context.Context, topic, id string, at time.Time) error) (int, any, error) {
	topic, id := r.PathValue("topic"), r.PathValue("id")
	if err := p.Allow(perm, topic); err != nil {
		return 0, nil, err
	}
	at, err := a.due(w, r)
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	return http.StatusNoContent, nil, to(ctx, topic, id, at)
}

func receipt(r *http.Request, token string) (wheelq.Receipt, error) {
	if token == "" {
		return wheelq.Receipt{}, apierr.New(apierr.Invalid, "no token: give the token reserve returned")
	}
	return wheelq.Receipt{Topic: r.PathValue("topic"), ID: r.PathValue("id"), Token: token}, nil
}

func (a *API) ack(w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	if err := p.Allow(auth.Consume, r.PathValue("topic")); err != nil {
		return 0, nil, err
	}
	var req AckRequest
	if err := a.decode(w, r, 4<<10, &req); err != nil {
		return 0, nil, err
	}
	rc, err := receipt(r, req.Token)
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	return http.StatusNoContent, nil, a.q.Ack(ctx, rc)
}

func (a *API) ackBatch(w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	var req AckBatchRequest
	if err := a.decode(w, r, a.opts.MaxBatchBody, &req); err != nil {
		return 0, nil, err
	}
	if err := a.checkBatch(len(req.Receipts), "receipts"); err != nil {
		return 0, nil, err
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	out := AckBatchResponse{Results: make([]AckResult, len(req.Receipts))}
	errs := make([]error, len(req.Receipts))
	var ok []wheelq.Receipt
	var at []int
	for i, rc := range req.Receipts {
		errs[i] = p.Allow(auth.Consume, rc.Topic)
		if errs[i] == nil && rc.Token == "" {
			errs[i] = apierr.New(apierr.Invalid, "no token: give the token reserve returned")
		}
		if errs[i] == nil {
			ok = append(ok, wheelq.Receipt{Topic: rc.Topic, ID: rc.ID, Token: rc.Token})
			at = append(at, i)
		}
	}
	if len(ok) > 0 {
		for k, err := range a.q.AckAll(ctx, ok...) { // one round trip
			errs[at[k]] = err
		}
	}
	for i, err := range errs {
		out.Results[i] = AckResult{Status: http.StatusNoContent}
		if err != nil {
			e := a.public(err)
			out.Results[i] = AckResult{Status: e.Code.Status(), Error: e}
		}
	}
	for _, res := range out.Results {
		if res.Error != nil {
			out.Failed++
		}
	}
	return http.StatusOK, out, nil
}

// public is err as a client sees it: an internal error's detail is
// logged, not sent.
func (a *API) public(err error) *apierr.Error {
	e := errmap.From(err)
	if e.Code == apierr.Internal {
		a.opts.Logger.Error("wheelq server: internal error", "err", err)
		e = apierr.New(apierr.Internal, loggedInternal)
	}
	return e
}

func (a *API) nack(w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	if err := p.Allow(auth.Consume, r.PathValue("topic")); err != nil {
		return 0, nil, err
	}
	var req NackRequest
	if err := a.decode(w, r, 8<<10, &req); err != nil {
		return 0, nil, err
	}
	rc, err := receipt(r, req.Token)
	if err != nil {
		return 0, nil, err
	}
	opts := wheelq.NackOptions{Permanent: req.Permanent}
	if req.Error != "" {
		opts.Err = errors.New(req.Error)
	}
	if req.RetryAfterMS != 0 {
		if opts.RetryAfter, err = ms(req.RetryAfterMS, "retry_after_ms", 0, 365*24*time.Hour); err != nil {
			return 0, nil, err
		}
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	return http.StatusNoContent, nil, a.q.Nack(ctx, &wheelq.Reservation{Receipt: rc}, opts)
}

func (a *API) touch(w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	if err := p.Allow(auth.Consume, r.PathValue("topic")); err != nil {
		return 0, nil, err
	}
	var req TouchRequest
	if err := a.decode(w, r, 4<<10, &req); err != nil {
		return 0, nil, err
	}
	rc, err := receipt(r, req.Token)
	if err != nil {
		return 0, nil, err
	}
	ttr := wheelq.DefaultTTR
	if req.TTRMS != 0 {
		if ttr, err = ms(req.TTRMS, "ttr_ms", wheelq.MinTTR, wheelq.MaxTTR); err != nil {
			return 0, nil, err
		}
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	dl, err := a.q.Touch(ctx, rc, ttr)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, TouchResponse{Deadline: dl}, nil
}

// reserveArgs decodes and checks a reserve's body.
func (a *API) reserveArgs(w http.ResponseWriter, r *http.Request, p *auth.Principal) (wheelq.ReserveOptions, time.Duration, error) {
	var req ReserveRequest
	if err := a.decode(w, r, 64<<10, &req); err != nil {
		return wheelq.ReserveOptions{}, 0, err
	}
	if len(req.Topics) == 0 {
		return wheelq.ReserveOptions{}, 0, apierr.New(apierr.Invalid, "topics: give at least one")
	}
	for _, t := range req.Topics {
		if err := p.Allow(auth.Consume, t); err != nil {
			return wheelq.ReserveOptions{}, 0, err
		}
	}
	opts := wheelq.ReserveOptions{Topics: req.Topics, Max: req.Max}
	if req.Max < 0 || req.Max > wheelq.MaxReserve {
		return opts, 0, apierr.New(apierr.Invalid, "max %d: want 1 to %d", req.Max, wheelq.MaxReserve)
	}
	var err error
	if req.TTRMS != 0 {
		if opts.TTR, err = ms(req.TTRMS, "ttr_ms", wheelq.MinTTR, wheelq.MaxTTR); err != nil {
			return opts, 0, err
		}
	}
	wait, err := ms(req.WaitMS, "wait_ms", 0, a.opts.MaxWait)
	if err != nil {
		return opts, 0, err
	}
	if wait == 0 {
		// What is ready, at once (the call is still bounded).
		opts.NoWait, wait = true, a.opts.Timeout
	}
	return opts, wait, nil
}

// waiting holds a long poll's place (429 past the token's cap) and gives
// its context: it ends after wait, when the client goes, or when
// CloseWaits is called. release gives the place back. Its body is read
// by then: its bytes go back to MaxInflightBody now, not when the reply
// begins after the wait (idle consumers' polls held the budget, and
// other requests were refused for bytes no longer held).
func (a *API) waiting(w http.ResponseWriter, r *http.Request, p *auth.Principal, wait time.Duration) (context.Context, func(), error) {
	if sw, ok := w.(*statusWriter); ok && sw.replying != nil {
		sw.replying()
	}
	if !a.holdWaiter(p.ID) {
		return nil, nil, apierr.New(apierr.TooManyWaiters, "token %s holds %d long polls already", p.ID, a.opts.MaxPollsPerToken)
	}
	// This request may outlast the server's write timeout.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + a.opts.Timeout))
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	stop := context.AfterFunc(a.waitCtx, cancel)
	a.mu.Lock()
	reauth := a.reauth
	a.mu.Unlock()
	stopReauth := context.AfterFunc(reauth, cancel)
	return ctx, func() { stop(); stopReauth(); cancel(); a.dropWaiter(p.ID) }, nil
}

// stillMay checks again, with the current authorizer, that the request's
// token may consume from topics: a reload of the tokens may have revoked
// it while the request waited.
func (a *API) stillMay(r *http.Request, topics []string) error {
	p, err := a.auth.Load().Authenticate(Bearer(r))
	if err != nil {
		return err
	}
	for _, t := range topics {
		if err := p.Allow(auth.Consume, t); err != nil {
			return err
		}
	}
	return nil
}

func (a *API) reserve(w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	opts, wait, err := a.reserveArgs(w, r, p)
	if err != nil {
		return 0, nil, err
	}
	ctx, release, err := a.waiting(w, r, p, wait)
	if err != nil {
		return 0, nil, err
	}
	defer release()
	got, err := a.q.Reserve(ctx, opts)
	if r.Context().Err() != nil {
		// The client went away while waiting: what came for it goes back
		// at once rather than lapsing at its time-to-run.
		a.release(got)
		w.WriteHeader(statusClientGone) // for the access log: no one reads it
		return 0, nil, nil
	}
	if aerr := a.stillMay(r, opts.Topics); aerr != nil {
		a.release(got) // revoked while it waited
		return 0, nil, aerr
	}
	out := ReserveResponse{Jobs: make([]Reserved, 0, len(got))}
	for _, res := range got {
		out.Jobs = append(out.Jobs, reserved(res))
	}
	if err != nil && len(got) == 0 && ctx.Err() == nil {
		return 0, nil, err
	}
	if len(got) == 0 {
		return http.StatusOK, out, nil
	}
	writeJSON(w, http.StatusOK, out)
	if http.NewResponseController(w).Flush() != nil {
		// Not written (a reply written but never read is a lost reply:
		// its jobs lapse at their time-to-run).
		a.release(got)
	}
	return 0, nil, nil
}

// statusClientGone is the access log's status of a long poll whose client
// went away (nginx's 499: client closed request).
const statusClientGone = 499

// release hands back reservations a client did not get.
func (a *API) release(got []*wheelq.Reservation) {
	if len(got) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.Timeout)
	defer cancel()
	if err := a.q.Release(ctx, got...); err != nil {
		a.opts.Logger.Warn("wheelq server: releasing the jobs of a client that went away; they lapse at their time-to-run instead", "err", err, "jobs", len(got))
	}
}

// reserveStream reserves for as long as wait_ms, writing each job as one
// line of JSON (a Reserved) the moment it is reserved, so a busy consumer
// has no gap between polls; the stream ends once it has written max jobs
// (as a long poll returns no more than max: the server's writes wait in
// the connection's buffers while a consumer is slow, and a stream without
// this bound reserved every job that came due meanwhile, their
// time-to-run running), at the wait's end, when the server stops, or
// with a last line {"error": ...}.
func (a *API) reserveStream(w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	opts, wait, err := a.reserveArgs(w, r, p)
	if err != nil {
		return 0, nil, err
	}
	ctx, release, err := a.waiting(w, r, p, wait)
	if err != nil {
		return 0, nil, err
	}
	defer release()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return 0, nil, nil
	}
	enc := json.NewEncoder(w)
	left := max(opts.Max, 1)
	for ctx.Err() == nil && left > 0 {
		opts.Max = left
		got, err := a.q.Reserve(ctx, opts)
		left -= len(got)
		if aerr := a.stillMay(r, opts.Topics); aerr != nil {
			a.release(got) // revoked while it waited
			_ = enc.Encode(ErrorResponse{Error: *a.public(aerr)})
			_ = rc.Flush()
			break
		}
		if len(got) > 0 && r.Context().Err() != nil {
			// The client is gone before these were written: they go back
			// at once.
			a.release(got)
			return 0, nil, nil
		}
		for _, res := range got {
			_ = enc.Encode(reserved(res))
		}
		if len(got) > 0 && rc.Flush() != nil {
			// Not written: back at once. (Written, they are the client's,
			// even if it leaves right after: as a long poll's reply, not
			// given back on a context that ended after the write, which
			// handed out again a job the client had, and acked.)
			a.release(got)
			return 0, nil, nil
		}
		if err != nil && ctx.Err() == nil {
			_ = enc.Encode(ErrorResponse{Error: *a.public(err)})
			_ = rc.Flush()
			break
		}
		if opts.NoWait {
			break // wait_ms 0: what was ready
		}
	}
	return 0, nil, nil
}

// Waiting is the number of long polls open.
func (a *API) Waiting() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, w := range a.waiters {
		n += w
	}
	return n
}

func (a *API) holdWaiter(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiters[id] >= a.opts.MaxPollsPerToken {
		return false
	}
	a.waiters[id]++
	return true
}

func (a *API) dropWaiter(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiters[id]--; a.waiters[id] <= 0 {
		delete(a.waiters, id)
	}
}

func (a *API) listQuery(r *http.Request, state wheelq.JobState) (wheelq.JobFilter, string, int, error) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "topic", "state", "overdue", "due_after", "due_before", "cursor", "limit":
		default:
			return wheelq.JobFilter{}, "", 0, apierr.New(apierr.Invalid, "unknown query parameter %q", k)
		}
	}
	f := wheelq.JobFilter{Topic: q.Get("topic"), State: state}
	if s := q.Get("state"); s != "" {
		if state != 0 {
			return f, "", 0, apierr.New(apierr.Invalid, "state: this route lists one state")
		}
		st, err := wheelq.ParseJobState(s)
		if err != nil {
			return f, "", 0, apierr.New(apierr.Invalid, "state %q: want pending, running or dead", s)
		}
		f.State = st
	}
	if s := q.Get("overdue"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return f, "", 0, apierr.New(apierr.Invalid, "overdue %q: want true or false", s)
		}
		f.Overdue = b
	}
	for _, tf := range []struct {
		name string
		dst  *time.Time
	}{{"due_after", &f.DueAfter}, {"due_before", &f.DueBefore}} {
		if s := q.Get(tf.name); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return f, "", 0, apierr.New(apierr.Invalid, "%s %q: want RFC 3339", tf.name, s)
			}
			*tf.dst = t
		}
	}
	limit := wheelq.DefaultListLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			return f, "", 0, apierr.New(apierr.Invalid, "limit %q: want 1 to 1000", s)
		}
		limit = n
	}
	return f, q.Get("cursor"), limit, nil
}

func (a *API) listState(r *http.Request, p *auth.Principal, state wheelq.JobState) (int, any, error) {
	f, cursor, limit, err := a.listQuery(r, state)
	if err != nil {
		return 0, nil, err
	}
	if err := p.Allow(auth.Admin, f.Topic); err != nil {
		return 0, nil, err
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	jobs, next, err := a.q.List(ctx, f, cursor, limit)
	if err != nil {
		return 0, nil, err
	}
	if jobs == nil {
		jobs = []wheelq.JobInfo{}
	}
	return http.StatusOK, ListResponse{Jobs: jobs, Next: next}, nil
}

func (a *API) list(_ http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	return a.listState(r, p, 0)
}

func (a *API) dead(_ http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	return a.listState(r, p, wheelq.StateDead)
}

func (a *API) counts(_ http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	ctx, cancel := a.ctx(r)
	defer cancel()
	cs, err := a.q.Counts(ctx)
	if err != nil {
		return 0, nil, err
	}
	out := CountsResponse{Topics: []TopicCounts{}}
	for _, c := range cs {
		if p.Allow(auth.Admin, c.Topic) != nil {
			continue // a topic this token may not see
		}
		out.Topics = append(out.Topics, TopicCounts{Topic: c.Topic, Pending: c.Pending, Overdue: c.Overdue,
			Running: c.Running, Dead: c.Dead, Paused: c.Paused})
	}
	return http.StatusOK, out, nil
}

func (a *API) pause(_ http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	topic := r.PathValue("topic")
	if err := p.Allow(auth.Admin, topic); err != nil {
		return 0, nil, err
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	return http.StatusNoContent, nil, a.q.Pause(ctx, topic)
}

func (a *API) resume(_ http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	topic := r.PathValue("topic")
	if err := p.Allow(auth.Admin, topic); err != nil {
		return 0, nil, err
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	return http.StatusNoContent, nil, a.q.Resume(ctx, topic)
}

// cancelBatch cancels many jobs (Queue.CancelBatch: a round trip per
// thousand), each with the result DELETE /v1/jobs/{topic}/{id} would have
// given it: 204, or its error.
func (a *API) cancelBatch(w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error) {
	var req CancelBatchRequest
	if err := a.decode(w, r, a.opts.MaxBatchBody, &req); err != nil {
		return 0, nil, err
	}
	if err := a.checkBatch(len(req.Jobs), "jobs"); err != nil {
		return 0, nil, err
	}
	out := BatchResponse{Results: make([]BatchResult, len(req.Jobs))}
	var refs []wheelq.JobRef
	var at []int
	for i, j := range req.Jobs {
		out.Results[i] = BatchResult{Topic: j.Topic, ID: j.ID, Status: http.StatusNoContent}
		if err := p.Allow(auth.Produce, j.Topic); err != nil {
			out.Results[i].Error = a.public(err)
			continue
		}
		refs = append(refs, wheelq.JobRef{Topic: j.Topic, ID: j.ID})
		at = append(at, i)
	}
	if len(refs) > 0 {
		ctx, cancel := a.ctx(r)
		defer cancel()
		errs, err := a.q.CancelBatch(ctx, refs)
		if err != nil {
			return 0, nil, err
		}
		for k, err := range errs {
			if err != nil {
				out.Results[at[k]].Error = a.public(err)
			}
		}
	}
	for i := range out.Results {
		if e := out.Results[i].Error; e != nil {
			out.Results[i].Status = e.Code.Status()
			out.Failed++
		}
	}
	return http.StatusOK, out, nil
}
