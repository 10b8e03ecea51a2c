package dashboard

// The JSON endpoints the page calls. Every answer is a JSON object; an
// error is {"error": "...", "code": "..."} with a 4xx or 5xx status (see
// Code).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/wheelq/wheelq"
)

// maxPayloadShown is how many bytes of a payload a job's detail shows.
const maxPayloadShown = 64 << 10

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// errorBody is an error answer: the message for people, and its stable
// code.
type errorBody struct {
	Error string `json:"error"`
	Code  Code   `json:"code"`
}

func writeError(w http.ResponseWriter, status int, code Code, msg string) {
	writeJSON(w, status, errorBody{Error: msg, Code: code})
}

// fail answers err as errorStatus maps it; a 503 (unavailable,
// contended) says Retry-After, as the server's HTTP API's do.
func (h *Handler) fail(w http.ResponseWriter, err error) {
	status, code := errorStatus(err)
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1") // unavailable, contended: retry
	}
	writeError(w, status, code, err.Error())
}

// countsCache shares Queue.Counts among the dashboard's requests. Counts
// reads every member of the namespace's sets (about a quarter of a second
// of Redis time per million jobs): every open page reloading its overview
// would scan again and again, and slow scans would pile up. One scan runs
// at a time (others wait for it, each no longer than its own context
// allows, and share it), and its result serves for four times as long as
// it took, at least a second, so the scans take at most a fifth of
// Redis's time whatever the number of pages; an action taken through the
// dashboard forgets it (at once: a scan under way then keeps nothing).
type countsCache struct {
	slot   chan struct{} // holds a token while a scan runs (made on first use)
	mu     sync.Mutex    // guards the fields below; never held during a scan
	counts []wheelq.TopicCounts
	at     time.Time        // when counts were read
	took   time.Duration    // how long that scan took
	gen    uint64           // forgets so far: a scan begun before one keeps nothing
	now    func() time.Time // the clock (nil: time.Now); tests set it
}

func (c *countsCache) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// cached returns the counts while they are fresh, and the generation
// they are (or a scan would be) of, and the slot of scans.
func (c *countsCache) cached() ([]wheelq.TopicCounts, uint64, chan struct{}, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slot == nil {
		c.slot = make(chan struct{}, 1)
	}
	if c.counts != nil && c.clock().Sub(c.at) < max(4*c.took, time.Second) {
		return c.counts, c.gen, c.slot, true
	}
	return nil, c.gen, c.slot, false
}

// get returns the cached counts while they are fresh, else scans with
// count (Queue.Counts) and keeps the result; an error is not kept. While
// another request's scan runs, it waits for that scan, until ctx ends.
func (c *countsCache) get(ctx context.Context, count func(context.Context) ([]wheelq.TopicCounts, error)) ([]wheelq.TopicCounts, error) {
	counts, _, slot, ok := c.cached()
	if ok {
		return counts, nil
	}
	select {
	case slot <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("dashboard: counts: waiting for the scan under way: %w", ctx.Err())
	}
	defer func() { <-slot }()
	counts, gen, _, ok := c.cached() // the scan waited for may have read them
	if ok {
		return counts, nil
	}
	start := c.clock()
	counts, err := count(ctx)
	if err != nil {
		return nil, err
	}
	end := c.clock()
	c.mu.Lock()
	if c.gen == gen {
		c.counts, c.at, c.took = counts, end, end.Sub(start)
	}
	c.mu.Unlock()
	return counts, nil
}

// forget drops the cached counts (after an action that changed them),
// and those of a scan under way.
func (c *countsCache) forget() {
	c.mu.Lock()
	c.counts = nil
	c.gen++
	c.mu.Unlock()
}

// overview: the namespace's figures, and what the page may show.
func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	if !h.authorize(w, r, Action{Kind: KindView}) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	s, err := h.q.Stats(ctx)
	if err != nil {
		h.fail(w, err)
		return
	}
	counts, err := h.counts.get(ctx, h.q.Counts)
	if err != nil {
		h.fail(w, err)
		return
	}
	can := map[Kind]bool{}
	for _, k := range actionKinds() {
		can[k] = h.allowed(r, k)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	late := func(l wheelq.Lateness) map[string]any {
		return map[string]any{"count": l.Count, "p50Ms": ms(l.P50), "p99Ms": ms(l.P99), "maxMs": ms(l.Max)}
	}
	// Every started process's figures (the process serving this page may
	// run no job: under wheelq-server with queue.start false it runs none).
	ws, err := h.q.Workers(ctx)
	if err != nil {
		h.fail(w, err)
		return
	}
	workers := make([]map[string]any, len(ws))
	for i, x := range ws {
		workers[i] = map[string]any{"member": x.Member, "atMs": x.At.UnixMilli(), "running": x.Running, "stuck": x.Stuck,
			"ownedPartitions": x.OwnedPartitions, "fired": x.Fired, "succeeded": x.Succeeded, "retried": x.Retried,
			"deadLettered": x.DeadLettered, "lateness": late(x.Lateness)}
	}
	all := wheelq.SumWorkers(ws)
	topics := make([]map[string]any, 0, len(counts))
	may := h.viewable(r)
	for _, c := range counts {
		if !may(c.Topic) {
			continue // a topic r may not view: not even its name
		}
		// throttled: the jobs its Limit holds back now, over the workers.
		topics = append(topics, map[string]any{"topic": c.Topic, "pending": c.Pending, "overdue": c.Overdue,
			"running": c.Running, "dead": c.Dead, "paused": c.Paused, "throttled": all.Throttled[c.Topic]})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"title":     h.opts.Title,
		"now":       h.now().UTC().Format(time.RFC3339Nano),
		"readOnly":  h.opts.ReadOnly,
		"can":       can,
		"refreshMs": h.refresh.Milliseconds(),
		"topics":    topics,
		"stats": map[string]any{
			"pending": s.Pending, "overdue": s.Overdue, "dead": s.Dead,
			"oldestOverdueMs": ms(s.OldestOverdue),
			"scheduled":       s.Scheduled, "fired": s.Fired, "succeeded": s.Succeeded,
			"retried": s.Retried, "deadLettered": s.DeadLettered, "cancelled": s.Cancelled,
			"running": s.Running, "stuck": s.Stuck, "inMemory": s.InMemory, "ownedPartitions": s.OwnedPartitions,
			"members": s.Members, "unstoredOutcomes": s.UnstoredOutcomes,
		},
		"lateness": late(s.Lateness),
		"workers":  workers,
		"all": map[string]any{"running": all.Running, "stuck": all.Stuck, "fired": all.Fired,
			"succeeded": all.Succeeded, "retried": all.Retried, "deadLettered": all.DeadLettered,
			"lateness": late(all.Lateness)},
	})
}

// jobs lists jobs, as Queue.List selects them: ?state=pending|running|dead
// (default pending), &overdue=1, &topic=T, &due_after= and &due_before=
// (RFC 3339), &limit=N (default 100, at most 1000), &cursor= (the next of
// a previous page). It answers {"jobs": [...], "next": cursor or ""}.
func (h *Handler) jobs(w http.ResponseWriter, r *http.Request) {
	qv := r.URL.Query()
	f := wheelq.JobFilter{Topic: qv.Get("topic")}
	if !h.authorize(w, r, Action{Kind: KindView, Topic: f.Topic}) {
		return
	}
	limit, err := intParam(qv.Get("limit"), 100, 1, wheelq.MaxListLimit)
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalid, "limit: "+err.Error())
		return
	}
	switch st := qv.Get("state"); st {
	case "", "pending":
		f.State = wheelq.StatePending
	case "running":
		f.State = wheelq.StateRunning
	case "dead":
		f.State = wheelq.StateDead
	default:
		writeError(w, http.StatusBadRequest, CodeInvalid, fmt.Sprintf("state %q: want pending, running or dead", st))
		return
	}
	switch o := qv.Get("overdue"); o {
	case "", "0", "false":
	case "1", "true":
		f.Overdue = true
	default:
		writeError(w, http.StatusBadRequest, CodeInvalid, fmt.Sprintf("overdue %q: want 1 or 0", o))
		return
	}
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"due_after", &f.DueAfter}, {"due_before", &f.DueBefore}} {
		if v := qv.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				writeError(w, http.StatusBadRequest, CodeInvalid, fmt.Sprintf("%s %q: want RFC 3339, like 2026-11-24T09:00:00Z", p.name, v))
				return
			}
			*p.t = t
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	// A page filtered by topic may come back short with more to read:
	// read on a few times to fill it.
	cursor := qv.Get("cursor")
	out := make([]map[string]any, 0, limit)
	may := h.viewable(r)
	for range 8 {
		js, next, err := h.q.List(ctx, f, cursor, limit-len(out))
		if err != nil {
			h.fail(w, err)
			return
		}
		for _, j := range js {
			if may(j.Topic) {
				out = append(out, jobJSON(j, false))
			}
		}
		cursor = next
		if cursor == "" || len(out) >= limit {
			break
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": out, "next": cursor})
}

// timelineWindow returns the length of a window of the timeline and the
// width of its buckets.
func timelineWindow(name string) (length, bucket time.Duration, ok bool) {
	switch name {
	case "minute":
		return time.Minute, time.Second, true
	case "hour":
		return time.Hour, time.Minute, true
	case "day":
		return 24 * time.Hour, time.Hour, true
	}
	return 0, 0, false
}

// maxTimelineJobs bounds the jobs a timeline reads (those of topics the
// request may not view included).
const maxTimelineJobs = 5000

// timeline counts the pending jobs due in the next minute, hour or day
// (?window=, default hour), by bucket (seconds, minutes, hours), for a
// topic (&topic=) or all, and returns the first few. It reads at most
// maxTimelineJobs jobs (about: whole pages); past them "truncated" is true
// and the counts stop there.
func (h *Handler) timeline(w http.ResponseWriter, r *http.Request) {
	qv := r.URL.Query()
	topic := qv.Get("topic")
	if !h.authorize(w, r, Action{Kind: KindView, Topic: topic}) {
		return
	}
	name := qv.Get("window")
	if name == "" {
		name = "hour"
	}
	length, width, ok := timelineWindow(name)
	if !ok {
		writeError(w, http.StatusBadRequest, CodeInvalid, fmt.Sprintf("window %q: want minute, hour or day", name))
		return
	}
	now := h.now()
	f := wheelq.JobFilter{Topic: topic, State: wheelq.StatePending, DueAfter: now, DueBefore: now.Add(length)}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	buckets := make([]int, length/width)
	var first []map[string]any
	total, read, cursor, truncated := 0, 0, "", false
	may := h.viewable(r)
	for {
		js, next, err := h.q.List(ctx, f, cursor, wheelq.MaxListLimit)
		if err != nil {
			h.fail(w, err)
			return
		}
		read += len(js) // the bound counts what is read, shown or not
		for _, j := range js {
			b := int(j.Due.Sub(now) / width)
			if b < 0 || b >= len(buckets) || !may(j.Topic) {
				continue
			}
			buckets[b]++
			total++
			if len(first) < 10 {
				first = append(first, jobJSON(j, false))
			}
		}
		cursor = next
		if cursor == "" {
			break
		}
		if read >= maxTimelineJobs {
			truncated = true
			break
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"window": name, "from": now.UTC().Format(time.RFC3339Nano), "bucketMs": width.Milliseconds(),
		"buckets": buckets, "total": total, "truncated": truncated, "first": first,
	})
}

// job: one job, ?topic=T&id=I, as Queue.Lookup returns it.
func (h *Handler) job(w http.ResponseWriter, r *http.Request) {
	qv := r.URL.Query()
	topic, id := qv.Get("topic"), qv.Get("id")
	if topic == "" || id == "" {
		writeError(w, http.StatusBadRequest, CodeInvalid, "topic and id are required")
		return
	}
	if !h.authorize(w, r, Action{Kind: KindView, Topic: topic, ID: id}) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	j, err := h.q.Lookup(ctx, topic, id)
	if err != nil {
		h.fail(w, err)
		return
	}
	paused, err := h.q.Paused(ctx)
	if err != nil {
		h.fail(w, err)
		return
	}
	// topicPaused: the page says so beside its Run now (which makes the
	// job due, but it waits for Resume).
	writeJSON(w, http.StatusOK, map[string]any{"job": jobJSON(j, true), "topicPaused": slices.Contains(paused, topic)})
}

// actionRequest is the body of a POST to an action endpoint.
type actionRequest struct {
	Topic string `json:"topic"`
	// ID is the job's; with All, empty.
	ID string `json:"id"`
	// All acts on every dead job of Topic (requeue and cancel only).
	All bool `json:"all"`
	// At is the due time of a requeue, RFC 3339 (default now).
	At string `json:"at,omitempty"`
}

// act returns the endpoint of an action: POST, JSON body actionRequest.
func (h *Handler) act(k Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(HeaderName) == "" {
			writeError(w, http.StatusForbidden, CodeCrossSite, "missing header "+HeaderName+" (a cross-site request?)")
			return
		}
		if err := h.csrf.Check(r); err != nil {
			writeError(w, http.StatusForbidden, CodeCrossSite, "cross-origin request refused: "+err.Error())
			return
		}
		if h.opts.ReadOnly {
			writeError(w, http.StatusForbidden, CodeReadOnly, "the dashboard is read-only")
			return
		}
		var req actionRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				writeError(w, http.StatusRequestEntityTooLarge, CodeTooLarge, "request body past 64 KiB")
				return
			}
			writeError(w, http.StatusBadRequest, CodeInvalid, "bad request body: "+err.Error()+` (want JSON {"topic": "...", "id": "..."})`)
			return
		}
		if _, err := dec.Token(); err != io.EOF {
			writeError(w, http.StatusBadRequest, CodeInvalid, "bad request body: more than one JSON value")
			return
		}
		topicOnly := k == KindPause || k == KindResume
		switch {
		case topicOnly && (req.Topic == "" || req.ID != "" || req.All):
			writeError(w, http.StatusBadRequest, CodeInvalid, fmt.Sprintf("%s takes a topic, and no id or all", k))
			return
		case topicOnly:
		case req.All && k != KindRequeue && k != KindCancel:
			writeError(w, http.StatusBadRequest, CodeInvalid, "all is for requeue and cancel (of a topic's dead jobs)")
			return
		case req.All && (req.Topic == "" || req.ID != ""):
			writeError(w, http.StatusBadRequest, CodeInvalid, "all needs a topic and no id")
			return
		case !req.All && (req.Topic == "" || req.ID == ""):
			writeError(w, http.StatusBadRequest, CodeInvalid, "topic and id are required")
			return
		}
		at := h.now()
		if req.At != "" {
			if k != KindRequeue {
				writeError(w, http.StatusBadRequest, CodeInvalid, "at is for requeue only")
				return
			}
			t, err := time.Parse(time.RFC3339, req.At)
			if err != nil {
				writeError(w, http.StatusBadRequest, CodeInvalid, fmt.Sprintf("at %q: want RFC 3339, like 2026-11-24T09:00:00Z", req.At))
				return
			}
			at = t
		}
		if !h.authorize(w, r, Action{Kind: k, Topic: req.Topic, ID: req.ID, All: req.All}) {
			return
		}
		// The next overview counts again (this runs before the response,
		// which net/http sends once the handler returned).
		defer h.counts.forget()
		ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
		defer cancel()
		if topicOnly {
			var err error
			if k == KindPause {
				err = h.q.Pause(ctx, req.Topic)
			} else {
				err = h.q.Resume(ctx, req.Topic)
			}
			if err != nil {
				h.fail(w, err)
				return
			}
			writeJSON(w, http.StatusOK, map[string]string{"message": fmt.Sprintf("%s %s: done", k, req.Topic)})
			return
		}
		if req.All {
			dead := wheelq.JobFilter{Topic: req.Topic, State: wheelq.StateDead}
			var n int
			var err error
			if k == KindRequeue {
				n, err = h.q.RequeueWhere(ctx, dead, at)
			} else {
				n, err = h.q.CancelWhere(ctx, dead)
			}
			if err != nil {
				h.fail(w, fmt.Errorf("%s: %w (%d done before the error)", k, err, n))
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"message": fmt.Sprintf("%s every dead job of %s: %d done", k, req.Topic, n), "count": n})
			return
		}
		var err error
		switch k {
		case KindUnrecur:
			err = h.unrecur(ctx, req.Topic, req.ID)
		case KindRequeue:
			err = h.q.Requeue(ctx, req.Topic, req.ID, at)
		case KindCancel:
			err = h.q.Cancel(ctx, req.Topic, req.ID)
		case KindRun:
			err = h.q.RunNow(ctx, req.Topic, req.ID)
		}
		msg := fmt.Sprintf("%s %s/%s: done", k, req.Topic, req.ID)
		switch {
		case errors.Is(err, wheelq.ErrRunning):
			msg += "; a run of it was in progress and goes on"
		case errors.Is(err, wheelq.ErrNotFound) && k == KindRequeue:
			h.fail(w, fmt.Errorf("%w (requeue moves a dead job)", err))
			return
		case errors.Is(err, wheelq.ErrNotFound) && k == KindRun:
			h.fail(w, fmt.Errorf("%w (run moves a pending job; requeue a dead one)", err))
			return
		case errors.Is(err, wheelq.ErrPaused):
			h.fail(w, err) // 409: made due, but it waits for Resume
			return
		case err != nil:
			h.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"message": msg})
	}
}

// jobJSON is a job for the page: wheelq's JSON shape for a job
// (JobInfo.MarshalJSON: the CLI's and the server's too), with
// "payload_size"; without the payload for a list (detail false), and for
// detail with at most maxPayloadShown bytes of it ("payload_truncated"),
// as text ("payload") when UTF-8, else "payload_base64".
func jobJSON(j wheelq.JobInfo, detail bool) map[string]any {
	payload := j.Payload
	if detail && len(payload) > maxPayloadShown {
		shown := payload[:maxPayloadShown]
		// Cut at a character's start, not inside one.
		for i := len(shown); i > 0 && i > len(shown)-utf8.UTFMax; i-- {
			if utf8.RuneStart(payload[i]) {
				if utf8.Valid(payload[:i]) {
					shown = payload[:i]
				}
				break
			}
		}
		j.Payload = shown
	}
	if !detail {
		j.Payload = nil
	}
	m := map[string]any{}
	if b, err := json.Marshal(j); err == nil {
		_ = json.Unmarshal(b, &m)
	} else {
		m["topic"], m["id"] = j.Topic, j.ID
		m["marshal_error"] = err.Error()
	}
	m["payload_size"] = len(payload)
	if detail {
		m["payload_truncated"] = len(j.Payload) < len(payload)
	}
	return m
}

// intParam parses a query parameter, def when empty.
func intParam(s string, def, lo, hi int) (int, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d out of range %d to %d", n, lo, hi)
	}
	return n, nil
}

// recurring lists the recurring schedules (Queue.Recurrings) of the
// topics the viewer may see: {"recurring": [{name, topic, when, next
// (RFC 3339, up to 3), stored, last: {id, state, due}}]}.
func (h *Handler) recurring(w http.ResponseWriter, r *http.Request) {
	if !h.authorize(w, r, Action{Kind: KindView}) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	rs, err := h.q.Recurrings(ctx)
	if err != nil {
		h.fail(w, err)
		return
	}
	out := []map[string]any{}
	may := h.viewable(r)
	for _, ri := range rs {
		if !may(ri.Topic) {
			continue
		}
		when := ri.Cron
		if ri.Every > 0 {
			when = "every " + ri.Every.String()
		}
		if ri.TimeZone != "" {
			when += " (" + ri.TimeZone + ")"
		}
		next := []string{}
		for _, n := range ri.Next {
			next = append(next, n.UTC().Format(time.RFC3339Nano))
		}
		e := map[string]any{"name": ri.Name, "topic": ri.Topic, "when": when, "missed": ri.Missed.String(), "next": next}
		if !ri.Stored.IsZero() {
			e["stored"] = ri.Stored.UTC().Format(time.RFC3339Nano)
		}
		if ri.Last != nil {
			e["last"] = map[string]any{"id": ri.Last.ID, "state": ri.Last.State.String(), "due": ri.Last.Due.UTC().Format(time.RFC3339Nano)}
		}
		out = append(out, e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"recurring": out})
}

// unrecur removes the recurring schedule name, if its topic is topic
// (the topic the action was authorized for): the check and the removal
// are one step, and nothing else of the schedules is read.
func (h *Handler) unrecur(ctx context.Context, topic, name string) error {
	return h.q.RemoveRecurringIf(ctx, name, func(stored *wheelq.Recurring) error {
		switch {
		case stored == nil:
			return fmt.Errorf("%w: recurring schedule %q", wheelq.ErrNotFound, name)
		case stored.Topic != topic:
			// As if absent: its topic may be one the caller may not see.
			return fmt.Errorf("%w: recurring schedule %q of topic %q", wheelq.ErrNotFound, name, topic)
		}
		return nil
	})
}
