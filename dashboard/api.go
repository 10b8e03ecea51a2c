package dashboard

// The JSON endpoints the page calls. Every answer is a JSON object; an
// error is {"error": "..."} with a 4xx or 5xx status.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/wheelq/wheelq"
)

// maxListed is the most jobs one list request returns.
const maxListed = 500

// maxPayloadShown is how many bytes of a payload a job's detail shows.
const maxPayloadShown = 64 << 10

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func (h *Handler) fail(w http.ResponseWriter, err error) {
	status := errorStatus(err)
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	writeError(w, status, err.Error())
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
	can := map[Kind]bool{}
	for _, k := range actionKinds {
		can[k] = h.allowed(r, k)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	writeJSON(w, http.StatusOK, map[string]any{
		"title":     h.opts.Title,
		"now":       h.now().UTC().Format(time.RFC3339Nano),
		"readOnly":  h.opts.ReadOnly,
		"can":       can,
		"refreshMs": h.refresh.Milliseconds(),
		"stats": map[string]any{
			"pending": s.Pending, "overdue": s.Overdue, "dead": s.Dead,
			"oldestOverdueMs": ms(s.OldestOverdue),
			"scheduled":       s.Scheduled, "fired": s.Fired, "succeeded": s.Succeeded,
			"retried": s.Retried, "deadLettered": s.DeadLettered, "cancelled": s.Cancelled,
			"running": s.Running, "inMemory": s.InMemory, "ownedPartitions": s.OwnedPartitions,
			"members": s.Members, "unstoredOutcomes": s.UnstoredOutcomes,
		},
		"lateness": map[string]any{
			"count": s.Lateness.Count, "p50Ms": ms(s.Lateness.P50), "p99Ms": ms(s.Lateness.P99),
			"maxMs": ms(s.Lateness.Max),
		},
	})
}

// jobs lists jobs: ?state=dead (the only list the queue offers by
// itself), &limit=N (default 100, at most 500), &topic=T (only T's).
func (h *Handler) jobs(w http.ResponseWriter, r *http.Request) {
	qv := r.URL.Query()
	topic := qv.Get("topic")
	if !h.authorize(w, r, Action{Kind: KindView, Topic: topic}) {
		return
	}
	limit, err := intParam(qv.Get("limit"), 100, 1, maxListed)
	if err != nil {
		writeError(w, http.StatusBadRequest, "limit: "+err.Error())
		return
	}
	switch st := qv.Get("state"); st {
	case "dead":
	case "":
		writeError(w, http.StatusBadRequest, "state: missing (want dead)")
		return
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("state %q: want dead", st))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	js, err := h.q.DeadJobs(ctx, maxListed)
	if err != nil {
		h.fail(w, err)
		return
	}
	out := make([]map[string]any, 0, min(len(js), limit))
	for _, j := range js {
		if topic != "" && j.Topic != topic {
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, jobJSON(j, false))
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": out})
}

// job: one job, ?topic=T&id=I, as Queue.Lookup returns it.
func (h *Handler) job(w http.ResponseWriter, r *http.Request) {
	qv := r.URL.Query()
	topic, id := qv.Get("topic"), qv.Get("id")
	if topic == "" || id == "" {
		writeError(w, http.StatusBadRequest, "topic and id are required")
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
	writeJSON(w, http.StatusOK, map[string]any{"job": jobJSON(j, true)})
}

// actionRequest is the body of a POST to an action endpoint.
type actionRequest struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
	// At is the due time of a requeue, RFC 3339 (default now).
	At string `json:"at,omitempty"`
}

// act returns the endpoint of an action: POST, JSON body actionRequest.
func (h *Handler) act(k Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(HeaderName) == "" {
			writeError(w, http.StatusForbidden, "missing header "+HeaderName+" (a cross-site request?)")
			return
		}
		if err := h.csrf.Check(r); err != nil {
			writeError(w, http.StatusForbidden, "cross-origin request refused: "+err.Error())
			return
		}
		if h.opts.ReadOnly {
			writeError(w, http.StatusForbidden, "the dashboard is read-only")
			return
		}
		var req actionRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "bad request body: "+err.Error()+` (want JSON {"topic": "...", "id": "..."})`)
			return
		}
		if _, err := dec.Token(); err != io.EOF {
			writeError(w, http.StatusBadRequest, "bad request body: more than one JSON value")
			return
		}
		if req.Topic == "" || req.ID == "" {
			writeError(w, http.StatusBadRequest, "topic and id are required")
			return
		}
		at := h.now()
		if req.At != "" {
			if k != KindRequeue {
				writeError(w, http.StatusBadRequest, "at is for requeue only")
				return
			}
			t, err := time.Parse(time.RFC3339, req.At)
			if err != nil {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("at %q: want RFC 3339, like 2026-11-24T09:00:00Z", req.At))
				return
			}
			at = t
		}
		if !h.authorize(w, r, Action{Kind: k, Topic: req.Topic, ID: req.ID}) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
		defer cancel()
		var err error
		switch k {
		case KindRequeue:
			err = h.q.Requeue(ctx, req.Topic, req.ID, at)
		case KindCancel:
			err = h.q.Cancel(ctx, req.Topic, req.ID)
		case KindRun:
			err = h.q.Reschedule(ctx, req.Topic, req.ID, at)
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
		case err != nil:
			h.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"message": msg})
	}
}

// jobJSON is a job for the page: every field of JobInfo under its Go name
// (fields added to JobInfo later show up too), State as its name, the
// payload as text when it is UTF-8 (else PayloadHex), detail or not.
func jobJSON(j wheelq.JobInfo, detail bool) map[string]any {
	payload := j.Payload
	j.Payload = nil
	m := map[string]any{}
	if b, err := json.Marshal(j); err == nil {
		_ = json.Unmarshal(b, &m)
	} else {
		m["Topic"], m["ID"] = j.Topic, j.ID
		m["MarshalError"] = err.Error()
	}
	m["State"] = j.State.String()
	delete(m, "Payload")
	m["PayloadSize"] = len(payload)
	if !detail {
		return m
	}
	shown := payload[:min(len(payload), maxPayloadShown)]
	m["PayloadTruncated"] = len(shown) < len(payload)
	if utf8.Valid(shown) {
		m["Payload"] = string(shown)
	} else {
		m["PayloadHex"] = fmt.Sprintf("% x", shown)
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
