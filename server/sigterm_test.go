package server_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/server/auth"
)

// pushRecorder is a push receiver that records each POST's arrival by
// job id; slow, if set, is an id whose POST it answers only after the
// test says so (release), having told it the POST came (got).
type pushRecorder struct {
	mu      sync.Mutex
	at      map[string][]time.Time
	slow    string
	got     chan struct{}
	release chan struct{}
}

func newPushRecorder(slow string) (*pushRecorder, *httptest.Server) {
	r := &pushRecorder{at: map[string][]time.Time{}, slow: slow, got: make(chan struct{}, 1), release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		id := req.Header.Get("Wheelq-Id")
		r.mu.Lock()
		r.at[id] = append(r.at[id], time.Now())
		r.mu.Unlock()
		if id == r.slow {
			r.got <- struct{}{}
			<-r.release
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	return r, srv
}

func (r *pushRecorder) times(id string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.at[id]...)
}

// termDuringPush starts a server with args, schedules the job "slow" of
// topic hooks (pushed to rec's receiver, which holds it), and sends the
// server SIGTERM once the push is out.
func termDuringPush(t *testing.T, rec *pushRecorder, args []string) *proc {
	t.Helper()
	a := startServer(t, nil, args...)
	require.Equal(t, 201, call(t, "POST", a.URL+"/v1/jobs/hooks", "", map[string]any{"id": "slow", "payload": "x"}, nil))
	select {
	case <-rec.got:
	case <-time.After(wait):
		t.Fatal("never pushed")
	}
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	return a
}

// TestServerSIGTERMWaitsForPushes: a SIGTERM while a push is in flight
// waits for the receiver's reply and acks the job before the process
// exits 0: a server started after finds it done and pushes it no more.
func TestServerSIGTERMWaitsForPushes(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec, recv := newPushRecorder("slow")
	defer recv.Close()
	cfg := pushConfig(t, recv.URL, 3, []byte("0123456789abcdef0123456789abcdef"))
	args := []string{"-config", cfg, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs)}
	a := termDuringPush(t, rec, args)
	time.Sleep(700 * time.Millisecond) // the server is stopping, the push still out
	select {
	case <-a.done:
		t.Fatalf("exited with a push in flight:\n%s", a.Log())
	default:
	}
	close(rec.release)
	require.Equal(t, 0, a.exited(wait), "%s", a.Log())

	b := startServer(t, nil, args...)
	var info map[string]any
	require.Equal(t, 200, call(t, "GET", b.URL+"/v1/jobs/hooks/slow", "", nil, &info))
	require.Equal(t, "done", info["state"], "%v", info)
	require.EqualValues(t, 1, info["attempts"])
	time.Sleep(300 * time.Millisecond)
	require.Len(t, rec.times("slow"), 1, "pushed once")
}

// TestServerSIGTERMCutsOffSlowPush: a SIGTERM while a push runs longer
// than http.shutdown_timeout cuts that push off and exits 0 (the stop
// went as configured; systemd must not count it a failure), after a WARN
// that says how many pushes were cut off and that they will be delivered
// again. They are: a server started after pushes the job again, and it
// ends done; nothing is lost.
func TestServerSIGTERMCutsOffSlowPush(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec, recv := newPushRecorder("slow")
	defer recv.Close()
	var release sync.Once
	answer := func() { release.Do(func() { close(rec.release) }) }
	defer answer() // before recv.Close, which waits for the held push
	cfg := pushConfig(t, recv.URL, 3, []byte("0123456789abcdef0123456789abcdef"))
	args := []string{"-config", cfg, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-set", "http.shutdown_timeout=1s", "-set", "log.access=false"}
	a := termDuringPush(t, rec, args)
	require.Equal(t, 0, a.exited(wait), "%s", a.Log())
	require.Regexp(t, `level=WARN msg="wheelq server: shutdown_timeout passed with 1 push\(es\) running: cut off; (each|they) will be delivered again`, a.Log())
	require.Len(t, rec.times("slow"), 1)
	answer() // the receiver answers now, to no one; the next push at once

	b := startServer(t, nil, args...)
	waitFor(t, func() bool {
		var info map[string]any
		require.Equal(t, 200, call(t, "GET", b.URL+"/v1/jobs/hooks/slow", "", nil, &info))
		return info["state"] == "done"
	})
	require.GreaterOrEqual(t, len(rec.times("slow")), 2, "pushed again after the restart")
}

// TestServerSIGTERMHandsOver: two servers on a namespace; one gets
// SIGTERM before the jobs come due. The other takes its partitions at
// once (a graceful stop gives its leases up), so every job is pushed
// once, none early, and none waits for the stopped server's leases to
// lapse (10 s).
func TestServerSIGTERMHandsOver(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rec, recv := newPushRecorder("")
	defer recv.Close()
	cfg := pushConfig(t, recv.URL, 3, []byte("0123456789abcdef0123456789abcdef"))
	args := []string{"-config", cfg, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-set", "log.access=false"}
	a := startServer(t, nil, args...)
	b := startServer(t, nil, args...)
	waitFor(t, func() bool { return strings.Contains(a.Log(), "members=2") && strings.Contains(b.Log(), "members=2") })

	const n = 64
	due := time.Now().Add(2500 * time.Millisecond)
	for i := range n {
		require.Equal(t, 201, call(t, "POST", []*proc{a, b}[i%2].URL+"/v1/jobs/hooks", "",
			map[string]any{"id": fmt.Sprintf("j%d", i), "payload": "x", "at": due}, nil))
	}
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, b.exited(wait), "%s", b.Log())
	// Due when both the due time and the stop are past (on a busy
	// machine the stop may end after the due time).
	ready := due
	if now := time.Now(); now.After(ready) {
		ready = now
	}

	waitFor(t, func() bool {
		for i := range n {
			if len(rec.times(fmt.Sprintf("j%d", i))) == 0 {
				return false
			}
		}
		return true
	})
	for i := range n {
		at := rec.times(fmt.Sprintf("j%d", i))
		require.Len(t, at, 1, "j%d pushed once", i)
		require.False(t, at[0].Before(due.Truncate(time.Millisecond)), "j%d pushed early", i)
		require.Less(t, at[0].Sub(ready), 5*time.Second, "j%d waited for the stopped server's leases to lapse", i)
	}
}

// TestReloadKeepsTokens: a loopback server started with tokens does not
// become open to anyone when a reload finds none (a token file truncated
// during a deploy): the reload is refused, the tokens in use stay. (Found
// by a red team: after `: > tokens; kill -HUP`, every route answered
// without a token, dashboard actions included.)
func TestReloadKeepsTokens(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	tok, sum, err := auth.Generate("ops")
	require.NoError(t, err)
	tokens := writeFile(t, "tokens", "ops "+sum+" admin=*\n")
	p := startServer(t, nil, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-set", "token_file="+tokens)
	require.Equal(t, 401, call(t, "GET", p.URL+"/v1/counts", "", nil, nil))
	require.NoError(t, os.WriteFile(tokens, nil, 0o600))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, func() bool { return strings.Contains(p.Log(), "reload refused") })
	require.Equal(t, 401, call(t, "GET", p.URL+"/v1/counts", "", nil, nil), "still closed")
	require.Equal(t, 200, call(t, "GET", p.URL+"/v1/counts", tok, nil, nil), "the token in use still works")
}
