package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/faultproxy"
	"github.com/wheelq/wheelq/internal/redistest"
)

// history is what a fault test's consumers saw of the jobs scheduled:
// each job's due time and whether it was acked, and every hand-out.
type history struct {
	mu    sync.Mutex
	due   map[string]time.Time // acknowledged schedules
	acked map[string]bool
	early []string
	outs  int

	stop chan struct{}  // closed when the test ends: the consumers return
	cw   sync.WaitGroup // the consumers
}

// newHistory returns an empty history whose consumers stop when t ends.
func newHistory(t *testing.T) *history {
	h := &history{due: map[string]time.Time{}, acked: map[string]bool{}, stop: make(chan struct{})}
	t.Cleanup(func() { close(h.stop); h.cw.Wait() })
	return h
}

// consumeThrough starts two consumers reserving and acking through srv
// (consume), until the test ends.
func (h *history) consumeThrough(srv *proc) {
	for range 2 {
		h.cw.Go(func() { h.consume(srv, h.stop) })
	}
}

// done waits until every acknowledged schedule is acked (waitAllAcked)
// and logs the counts.
func (h *history) done(t *testing.T) {
	t.Helper()
	h.waitAllAcked(t, wait)
	h.mu.Lock()
	defer h.mu.Unlock()
	t.Logf("%d jobs, %d hand-outs", len(h.due), h.outs)
}

// schedule schedules n pulled jobs through srv, due over [0, spread)
// from now, recording those acknowledged (201) with the due time taken
// before the request.
func (h *history) schedule(t *testing.T, srv *proc, prefix string, n int, spread time.Duration) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	for i := range n {
		id := fmt.Sprint(prefix, i)
		// Whole milliseconds, as delay_ms carries them: a due time taken
		// with the fraction the request drops is later than the server's.
		delay := (spread * time.Duration(i) / time.Duration(n)).Truncate(time.Millisecond)
		at := time.Now().Add(delay)
		body, _ := json.Marshal(map[string]any{"id": id, "payload": id, "delay_ms": delay.Milliseconds()})
		resp, err := c.Post(srv.URL+"/v1/jobs/orders", "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, "schedule %s", id)
		h.mu.Lock()
		h.due[id] = at // the server reads its clock after: the due is no earlier
		h.mu.Unlock()
	}
}

// consume reserves and acks through srv until stop is closed, recording
// every hand-out; a request that fails (a stopped or cut-off server) is
// tried again after a pause.
func (h *history) consume(srv *proc, stop <-chan struct{}) {
	c := &http.Client{Timeout: 3 * time.Second}
	for {
		select {
		case <-stop:
			return
		default:
		}
		req, _ := json.Marshal(map[string]any{"topics": []string{"orders"}, "max": 20, "wait_ms": 500, "ttr_ms": 3000})
		resp, err := c.Post(srv.URL+"/v1/reserve", "application/json", bytes.NewReader(req))
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		var out struct {
			Jobs []struct{ ID, Token string }
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		now := time.Now()
		for _, j := range out.Jobs {
			h.mu.Lock()
			h.outs++
			if d, ok := h.due[j.ID]; ok && now.Before(d) {
				h.early = append(h.early, fmt.Sprintf("%s %v early", j.ID, d.Sub(now)))
			}
			h.mu.Unlock()
			ack, _ := json.Marshal(map[string]string{"token": j.Token})
			r, err := c.Post(srv.URL+"/v1/jobs/orders/"+j.ID+"/ack", "application/json", bytes.NewReader(ack))
			if err != nil {
				continue // lapses at its time-to-run and comes back
			}
			r.Body.Close()
			if r.StatusCode == http.StatusNoContent {
				h.mu.Lock()
				h.acked[j.ID] = true
				h.mu.Unlock()
			}
		}
	}
}

// waitAllAcked fails the test unless every acknowledged schedule is
// acked within d, and checks that none was handed out early.
func (h *history) waitAllAcked(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		h.mu.Lock()
		missing := 0
		for id := range h.due {
			if !h.acked[id] {
				missing++
			}
		}
		early := append([]string(nil), h.early...)
		n := len(h.due)
		h.mu.Unlock()
		require.Empty(t, early, "handed out before their due time")
		if missing == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d of %d acknowledged jobs never acked within %v", missing, n, d)
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServerPaused: of two servers on one namespace, one is stopped with
// SIGSTOP past its lease while jobs come due. The other takes its
// partitions over and hands their jobs out: nothing acknowledged is lost,
// nothing is handed out early. Resumed, the stopped server serves again
// (its stale claims fenced) and its own consumers get jobs.
func TestServerPaused(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	args := []string{"-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-pull", "orders", "-set", "log.access=false"}
	a := startServer(t, nil, args...)
	b := startServer(t, nil, args...)
	h := newHistory(t)
	h.consumeThrough(b)

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	h.schedule(t, b, "p", 200, 2*time.Second)
	// The lease (10 s) lapses while a is stopped: b takes a's partitions
	// and their jobs, without a.
	h.waitAllAcked(t, wait)
	t.Logf("all %d acked %v after a stopped", len(h.due), time.Since(stopped).Round(time.Millisecond))

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGCONT))
	h.consumeThrough(a)
	h.schedule(t, a, "q", 200, time.Second)
	h.schedule(t, b, "r", 200, time.Second)
	h.done(t)
}

// TestServerCutOffFromRedis: one of two servers loses its link to Redis
// (a partition: bytes dropped both ways, connections left open). Its
// requests fail with 503 and the unavailable code (or outcome_unknown for
// a write in flight), never hang past its timeout; the other server takes
// its partitions over and hands out every job due meanwhile. Healed, the
// cut-off server schedules and serves again. Nothing acknowledged is
// lost; nothing is handed out early.
func TestServerCutOffFromRedis(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	px := faultproxy.Start(t, rs.Addr)
	base := []string{"-addr", "127.0.0.1:0", "-pull", "orders", "-set", "log.access=false"}
	a := startServer(t, nil, append(base, "-redis-url", "redis://"+px.Addr()+"/0")...)
	b := startServer(t, nil, append(base, "-redis-url", redisURL(rs))...)
	h := newHistory(t)
	h.consumeThrough(b)

	px.Blackhole(true)
	cut := time.Now()
	h.schedule(t, b, "p", 200, 2*time.Second)
	// The first write through a meets the cut: 504 outcome_unknown (it
	// may have been applied) or 503 unavailable, within the request's
	// timeout; once a knows Redis is out of reach, at once with 503. A
	// write let through to probe whether Redis is back (one per 250 ms;
	// a busy machine may leave that long between two requests) meets the
	// cut again: 504; a few writes find the fast refusal.
	write := func(i int) (int, string, time.Duration) {
		var e struct {
			Error struct{ Code string }
		}
		start := time.Now()
		st := call(t, "POST", a.URL+"/v1/jobs/orders", "", map[string]any{"id": fmt.Sprint("through-a", i), "payload": "x"}, &e)
		return st, e.Error.Code, time.Since(start)
	}
	unanswered := map[int]string{http.StatusGatewayTimeout: "outcome_unknown", http.StatusServiceUnavailable: "unavailable"}
	check := func(i, st int, code string) {
		require.Contains(t, unanswered, st, "write %d through the cut-off server: %d %s", i, st, code)
		require.Equal(t, unanswered[st], code, "write %d", i)
	}
	st, code, first := write(0)
	check(0, st, code)
	require.Less(t, first, 15*time.Second, "the first answered within its timeout")
	var fast time.Duration
	for i, refused := 1, false; !refused; i++ {
		require.LessOrEqual(t, i, 3, "no write refused at once")
		st, code, took := write(i)
		check(i, st, code)
		refused, fast = st == http.StatusServiceUnavailable && took < time.Second, took
	}
	h.waitAllAcked(t, wait)
	t.Logf("all %d acked %v after the cut; a's refusals took %v, then %v", len(h.due), time.Since(cut).Round(time.Millisecond),
		first.Round(time.Millisecond), fast.Round(time.Millisecond))

	px.Blackhole(false)
	a.waitReady(http.DefaultClient)
	h.consumeThrough(a)
	h.schedule(t, a, "q", 200, time.Second)
	h.done(t)
}

// TestServerPushUnderFaults: two servers push a topic's due jobs to a
// receiver that fails one first attempt in five; one server is killed
// with SIGKILL while jobs come due, maybe with POSTs in flight. Every job
// acknowledged is received with a 2xx in the end (the other server takes
// the killed one's partitions over and retries what its POSTs left
// unsettled), none before its due time, and each ends done.
func TestServerPushUnderFaults(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	type got struct {
		at      time.Time
		attempt string
	}
	var mu sync.Mutex
	hits := map[string][]got{} // job id -> its POSTs
	okd := map[string]bool{}   // answered 2xx
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		parts := strings.Split(r.Header.Get("webhook-id"), "/") // topic/id/attempt
		if len(parts) != 3 {
			http.Error(w, "no webhook-id", http.StatusBadRequest)
			return
		}
		id := parts[1]
		mu.Lock()
		hits[id] = append(hits[id], got{time.Now(), parts[2]})
		fail := parts[2] == "1" && failsFirst(id)
		if !fail {
			okd[id] = true
		}
		mu.Unlock()
		if fail {
			http.Error(w, "try later", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	cfg := pushConfig(t, recv.URL, 10, []byte("0123456789abcdef0123456789abcdef"))
	args := []string{"-config", cfg, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-set", "log.access=false"}
	a := startServer(t, nil, args...)
	b := startServer(t, nil, args...)

	const n = 300
	due := map[string]time.Time{}
	c := &http.Client{Timeout: 5 * time.Second}
	for i := range n {
		id := fmt.Sprint("h", i)
		// Whole milliseconds, as delay_ms carries them (see schedule).
		delay := (300*time.Millisecond + 2*time.Second*time.Duration(i)/n).Truncate(time.Millisecond)
		at := time.Now().Add(delay)
		body, _ := json.Marshal(map[string]any{"id": id, "payload": id, "delay_ms": delay.Milliseconds()})
		resp, err := c.Post(b.URL+"/v1/jobs/hooks", "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		due[id] = at
	}
	time.Sleep(time.Until(due["h100"]))
	require.NoError(t, a.cmd.Process.Kill())
	a.exited(wait)

	deadline := time.Now().Add(wait)
	for {
		mu.Lock()
		missing := 0
		for id := range due {
			if !okd[id] {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d of %d jobs never received with a 2xx", missing, n)
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	posts, again := 0, 0
	for id, hs := range hits {
		for _, h := range hs {
			require.False(t, h.at.Before(due[id]), "%s attempt %s pushed %v before its due time", id, h.attempt, due[id].Sub(h.at))
		}
		posts += len(hs)
		if len(hs) > 1 && !failsFirst(id) {
			again++ // sent again though its first POST got a 2xx: the kill's
		}
	}
	mu.Unlock()
	for id := range due {
		deadline := time.Now().Add(wait)
		for {
			var info map[string]any
			require.Equal(t, 200, call(t, "GET", b.URL+"/v1/jobs/hooks/"+id, "", nil, &info))
			if info["state"] == "done" {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s not done: %v", id, info)
			time.Sleep(20 * time.Millisecond)
		}
	}
	require.GreaterOrEqual(t, posts, n+n/5, "the failed first attempts were retried")
	t.Logf("%d jobs, %d POSTs, %d sent again after a 2xx (the killed server's)", n, posts, again)
}

// failsFirst says which jobs' first POST the receiver fails: one in five.
func failsFirst(id string) bool { return strings.HasSuffix(id, "0") || strings.HasSuffix(id, "5") }
