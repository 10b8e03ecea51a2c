package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/server/push"
)

// wait bounds what a test waits for (room for a busy machine).
const wait = 30 * time.Second

// binary is the wheelq-server built once for the package's tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wheelq-server-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "wheelq-server")
	build := exec.Command("go", "build", "-race", "-o", binary, "./cmd/wheelq-server")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building wheelq-server:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a wheelq-server process.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	URL  string
	mu   sync.Mutex
	log  bytes.Buffer
	done chan struct{}
}

// listening finds the server's address in its log, text or JSON.
var listening = regexp.MustCompile(`wheelq server: listening"(?: addr=|,"addr":")(https?://[0-9.:]+)`)

// startServer starts wheelq-server with args (its Redis and address come
// from the caller) and waits until it listens and is ready.
func startServer(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startServerWith(t, http.DefaultClient, env, args...)
}

// startServerWith is startServer checking readiness with client (one
// that trusts a TLS server's certificate).
func startServerWith(t *testing.T, client *http.Client, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, done: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = append(os.Environ(), env...)
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	found := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if m := listening.FindStringSubmatch(line); m != nil {
				found <- m[1]
			}
		}
		_ = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("wheelq-server log:\n%s", p.Log())
		}
	})
	select {
	case p.URL = <-found:
	case <-p.done:
		t.Fatalf("wheelq-server exited before listening:\n%s", p.Log())
	case <-time.After(wait):
		t.Fatalf("wheelq-server did not listen within %v:\n%s", wait, p.Log())
	}
	p.waitReady(client)
	return p
}

// waitReady waits (up to wait) until the server's /readyz says 200.
func (p *proc) waitReady(client *http.Client) {
	p.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		resp, err := client.Get(p.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		require.True(p.t, time.Now().Before(deadline), "not ready within %v", wait)
		time.Sleep(20 * time.Millisecond)
	}
}

// Log is what the process wrote to stderr so far.
func (p *proc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// exited waits for the process to end and returns its exit code.
func (p *proc) exited(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		p.t.Fatalf("wheelq-server did not exit within %v", within)
		return -1
	}
}

// call sends a JSON request and decodes the JSON reply into out (if not
// nil); it returns the status.
func call(t *testing.T, method, url, token string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil && len(b) > 0 {
		require.NoError(t, json.Unmarshal(b, out), "%s", b)
	}
	return resp.StatusCode
}

func redisURL(rs *redistest.Server) string { return "redis://" + rs.Addr + "/0" }

// TestServerRefusesOpenRemote: a non-loopback address without tokens is
// refused at start, with a message saying what to do; a bad config key is
// named; -print-config masks secrets.
func TestServerRefusesOpenRemote(t *testing.T) {
	out, err := exec.Command(binary, "-addr", "0.0.0.0:0", "-redis-url", "redis://127.0.0.1:1/0").CombinedOutput()
	require.Error(t, err)
	require.Equal(t, 2, err.(*exec.ExitError).ExitCode())
	require.Contains(t, string(out), "no token is configured")

	out, err = exec.Command(binary, "-set", "http.max_waitt=1s").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "http.max_waitt")

	cmd := exec.Command(binary, "-print-config", "-redis-url", "redis://:hunter2@127.0.0.1:1/0")
	cmd.Env = append(os.Environ(), "WHEELQ_SERVER_QUEUE_NAMESPACE=fromenv")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NotContains(t, string(out), "hunter2")
	require.Contains(t, string(out), `namespace = "fromenv"`)

	out, err = exec.Command(binary, "token", "-id", "shop", "-consume", "").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `# wq_shop_[A-Za-z0-9_-]{43}\n\[\[token\]\]\nid = "shop"\nsha256 = "[0-9a-f]{64}"`, string(out))
	// An entry the server would refuse is refused here, not printed (a
	// newcomer got one printed, then a server that would not start).
	out, err = exec.Command(binary, "token", "-id", "shop", "-produce", "[").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), `produce pattern "["`)
	require.NotContains(t, string(out), "[[token]]")
	out, err = exec.Command(binary, "-h").CombinedOutput()
	require.NoError(t, err, "-h is not an error")
	require.Contains(t, string(out), "wheelq-server token -id ID", "-h names the token command")
}

// TestServerGracefulStop: SIGTERM answers an open long poll at once with
// no jobs, finishes, and exits 0.
func TestServerGracefulStop(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	p := startServer(t, nil, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-pull", "sms")
	status := make(chan int, 1)
	body := make(chan string, 1)
	go func() {
		var out map[string]any
		status <- call(t, "POST", p.URL+"/v1/reserve", "", map[string]any{"topics": []string{"sms"}, "wait_ms": 50000}, &out)
		b, _ := json.Marshal(out)
		body <- string(b)
	}()
	time.Sleep(300 * time.Millisecond) // the poll is open
	start := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 200, <-status)
	require.JSONEq(t, `{"jobs":[]}`, <-body)
	require.Less(t, time.Since(start), 15*time.Second)
	require.Equal(t, 0, p.exited(wait), "%s", p.Log())
	require.Contains(t, p.Log(), "wheelq server: stopped")
}

// TestServerKill9UnderLoad: servers on one namespace, producers and
// consumers over HTTP; one server is killed with SIGKILL mid-load.
// Nothing acknowledged is lost: every job is acked in the end (handed out
// again after its reservation's time-to-run where the dead server's
// consumer held it), none handed out before its due time.
func TestServerKill9UnderLoad(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	args := []string{"-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-pull", "orders", "-set", "log.access=false"}
	a := startServer(t, nil, args...)
	b := startServer(t, nil, args...)

	const jobs = 300
	due := map[string]time.Time{}
	var dmu sync.Mutex
	// Producers: half through each server, due over the next 1.5 s.
	var wg sync.WaitGroup
	for w := range 4 {
		srv := []*proc{a, b}[w%2]
		wg.Go(func() {
			for i := w; i < jobs; i += 4 {
				id := fmt.Sprint("o", i)
				delay := float64(i%30) * 50
				at := time.Now().Add(time.Duration(delay) * time.Millisecond)
				// Through a server that is being killed: an error is no
				// acknowledgement, and the job is not counted.
				body, _ := json.Marshal(map[string]any{"id": id, "payload": id, "delay_ms": delay})
				resp, err := http.Post(srv.URL+"/v1/jobs/orders", "application/json", bytes.NewReader(body))
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 201 {
					dmu.Lock()
					due[id] = at
					dmu.Unlock()
				}
			}
		})
	}
	// Consumers: on both servers; a's die with it.
	type got struct {
		id    string
		at    time.Time
		acked bool
	}
	gotc := make(chan got, 4*jobs)
	stop := make(chan struct{})
	consume := func(srv *proc, isA bool) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			var out struct {
				Jobs []struct{ ID, Token string }
			}
			req, _ := json.Marshal(map[string]any{"topics": []string{"orders"}, "max": 20, "wait_ms": 500, "ttr_ms": 2000})
			resp, err := http.Post(srv.URL+"/v1/reserve", "application/json", bytes.NewReader(req))
			if err != nil {
				if isA {
					return // killed
				}
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
				continue
			}
			now := time.Now()
			for _, j := range out.Jobs {
				if isA {
					// a's consumers are slow: they hold what they took
					// until a dies, so it must come back through b.
					gotc <- got{j.ID, now, false}
					continue
				}
				ack, _ := json.Marshal(map[string]string{"token": j.Token})
				acked := false
				if r, err := http.Post(srv.URL+"/v1/jobs/orders/"+j.ID+"/ack", "application/json", bytes.NewReader(ack)); err == nil {
					acked = r.StatusCode == 204
					r.Body.Close()
				}
				gotc <- got{j.ID, now, acked}
			}
		}
	}
	var cw sync.WaitGroup
	for i := range 4 {
		cw.Go(func() { consume([]*proc{a, b}[i%2], i%2 == 0) })
	}
	time.Sleep(700 * time.Millisecond)
	require.NoError(t, a.cmd.Process.Kill())
	a.exited(wait)
	wg.Wait()

	// Every acknowledged job must be acked by a consumer in the end (those
	// the dead server had handed out unacked come back after their
	// time-to-run), none handed out early.
	deadline := time.Now().Add(wait)
	seen := map[string]bool{}
	heldByA := 0
	for {
		dmu.Lock()
		n := len(due)
		missing := 0
		for id := range due {
			if !seen[id] {
				missing++
			}
		}
		dmu.Unlock()
		if missing == 0 {
			break
		}
		select {
		case g := <-gotc:
			seen[g.id] = seen[g.id] || g.acked
			if !g.acked {
				heldByA++
			}
			dmu.Lock()
			d, ok := due[g.id]
			dmu.Unlock()
			if ok {
				// The due time was taken before the request: a job handed
				// out before it is early.
				require.False(t, g.at.Before(d), "%s handed out %v before its due time", g.id, d.Sub(g.at))
			}
		case <-time.After(time.Until(deadline)):
			t.Fatalf("%d of %d acknowledged jobs never acked", missing, n)
		}
	}
	close(stop)
	cw.Wait()
	require.Positive(t, heldByA, "the killed server's consumers held jobs")
	t.Logf("%d jobs, %d held through the killed server and handed out again", len(due), heldByA)
	dmu.Lock()
	require.Greater(t, len(due), jobs/2, "most schedules acknowledged")
	dmu.Unlock()
}

// TestServerPush: a pushed topic's due job is POSTed to the configured
// receiver at its time, signed; a failure is retried by the backoff and a
// 2xx acks it.
func TestServerPush(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	type hit struct {
		at   time.Time
		body []byte
		h    http.Header
	}
	hits := make(chan hit, 10)
	var n atomic.Int32
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		hits <- hit{time.Now(), b, r.Header.Clone()}
		if n.Add(1) == 1 {
			http.Error(w, "try later", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	key := []byte("0123456789abcdef0123456789abcdef")
	cfg := pushConfig(t, recv.URL, 3, key)
	p := startServer(t, nil, "-config", cfg, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs))
	payload := []byte{0, 1, 2, 0xff, 'x'}
	due := time.Now().Add(400 * time.Millisecond)
	require.Equal(t, 201, call(t, "POST", p.URL+"/v1/jobs/hooks", "", map[string]any{"id": "h1", "at": due,
		"payload_base64": base64.StdEncoding.EncodeToString(payload), "headers": map[string]string{"k": "v"}}, nil))
	for attempt := 1; attempt <= 2; attempt++ {
		select {
		case h := <-hits:
			require.False(t, h.at.Before(due), "pushed before its due time")
			require.Equal(t, payload, h.body)
			require.NoError(t, push.Verify(key, h.h, h.body, time.Now(), time.Minute))
			require.Equal(t, fmt.Sprint(attempt), h.h.Get(push.HeaderAttempt))
			require.Equal(t, "hooks/h1/"+fmt.Sprint(attempt), h.h.Get("webhook-id"))
		case <-time.After(wait):
			t.Fatalf("attempt %d never pushed", attempt)
		}
	}
	deadline := time.Now().Add(wait)
	for {
		var info map[string]any
		require.Equal(t, 200, call(t, "GET", p.URL+"/v1/jobs/hooks/h1", "", nil, &info))
		if info["state"] == "done" {
			require.EqualValues(t, 2, info["attempts"])
			break
		}
		require.True(t, time.Now().Before(deadline), "not done: %v", info)
		time.Sleep(20 * time.Millisecond)
	}
}

// pushConfig writes a config file that pushes topic "hooks" to recvURL's
// /in, signed with key, its jobs tried up to maxAttempts times, and
// returns its path.
func pushConfig(t *testing.T, recvURL string, maxAttempts int, key []byte) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "wheelq-server.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
[queue]
max_attempts = %d
[push]
allow_hosts = [%q]
[[push.topic]]
topic = "hooks"
url = "%s/in"
secret = "whsec_%s"
timeout = "5s"
`, maxAttempts, strings.TrimPrefix(recvURL, "http://"), recvURL, base64.StdEncoding.EncodeToString(key))), 0o600))
	return cfg
}

// TestServerPushTopicBackoff: a pushed topic's retry_base reaches the
// queue: after a failed push the job is due again about retry_base later
// (1h ±25%), not after the queue's backoff (1s ±25%).
func TestServerPushTopicBackoff(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	hits := make(chan struct{}, 10)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- struct{}{}
		http.Error(w, "down", http.StatusBadGateway)
	}))
	defer recv.Close()
	cfg := pushConfig(t, recv.URL, 3, []byte("0123456789abcdef0123456789abcdef"))
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("retry_base = \"1h\"\nretry_max = \"2h\"\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	p := startServer(t, nil, "-config", cfg, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs))
	require.Equal(t, 201, call(t, "POST", p.URL+"/v1/jobs/hooks", "", map[string]any{"id": "b1", "payload": "x"}, nil))
	select {
	case <-hits:
	case <-time.After(wait):
		t.Fatal("never pushed")
	}
	failed := time.Now()
	deadline := time.Now().Add(wait)
	for {
		var info map[string]any
		require.Equal(t, 200, call(t, "GET", p.URL+"/v1/jobs/hooks/b1", "", nil, &info))
		if info["state"] == "pending" && info["attempts"] == float64(1) {
			due, err := time.Parse(time.RFC3339Nano, info["due"].(string))
			require.NoError(t, err)
			require.Greater(t, due.Sub(failed), 44*time.Minute, "retried after the topic's backoff: %v", info)
			require.Less(t, due.Sub(failed), 76*time.Minute, "%v", info)
			break
		}
		require.True(t, time.Now().Before(deadline), "not retried: %v", info)
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-hits:
		t.Fatal("pushed again before the topic's backoff")
	case <-time.After(200 * time.Millisecond):
	}
}

// TestServerPushLimit: a pushed topic's concurrency = 1 and rate = 20
// (per second) hold: the receiver never sees two POSTs at once, and the
// i-th comes no sooner than 50 ms × i after the due time.
func TestServerPushLimit(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	var now, most atomic.Int32
	starts := make(chan time.Time, 10)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		starts <- time.Now()
		time.Sleep(20 * time.Millisecond)
		now.Add(-1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	host := strings.TrimPrefix(recv.URL, "http://")
	cfg := filepath.Join(t.TempDir(), "wheelq-server.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
[push]
allow_hosts = [%q]
[[push.topic]]
topic = "sms"
url = "%s/in"
secret = "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="
concurrency = 1
rate = 20
`, host, recv.URL)), 0o600))
	p := startServer(t, nil, "-config", cfg, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs))
	due := time.Now().Add(300 * time.Millisecond)
	var jobs []map[string]any
	for i := range 6 {
		jobs = append(jobs, map[string]any{"topic": "sms", "id": fmt.Sprint(i), "at": due})
	}
	require.Equal(t, 200, call(t, "POST", p.URL+"/v1/batch", "", map[string]any{"jobs": jobs}, nil))
	var at []time.Time
	for range 6 {
		select {
		case s := <-starts:
			at = append(at, s)
		case <-time.After(wait):
			t.Fatalf("%d of 6 pushed", len(at))
		}
	}
	require.EqualValues(t, 1, most.Load(), "POSTs at once")
	// The rate gives the i-th start due + i × 50 ms; a start is never
	// before the one it was given (on a busy machine, later).
	for i, s := range at {
		require.False(t, s.Before(due.Add(time.Duration(i)*50*time.Millisecond-time.Millisecond)), "start %d at %v, due %v", i, s.Sub(due), time.Duration(i)*50*time.Millisecond)
	}
}

// TestServerNeedsARedis: without a Redis named (and without -dev) the
// server refuses to start, saying how to name one.
func TestServerNeedsARedis(t *testing.T) {
	out, err := exec.Command(binary, "-addr", "127.0.0.1:0").CombinedOutput()
	require.Error(t, err)
	require.Equal(t, 2, err.(*exec.ExitError).ExitCode())
	require.Contains(t, string(out), "no Redis given")
	require.Contains(t, string(out), "-dev")
}

// TestServerSchedSlice: process.sched_slice reaches every thread of the
// server's process, and the server says so; without it the kernel's
// default stays.
func TestServerSchedSlice(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a Linux setting")
	}
	slices := func(pid int) []string {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/sched", pid))
		require.NoError(t, err)
		require.NotEmpty(t, tasks)
		var out []string
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				continue // the thread exited
			}
			for _, l := range strings.Split(string(b), "\n") {
				if fs := strings.Fields(l); len(fs) == 3 && fs[0] == "se.slice" {
					out = append(out, fs[2])
				}
			}
		}
		return out
	}
	p := startServer(t, nil, "-dev", "-addr", "127.0.0.1:0", "-set", "process.sched_slice=300us")
	if strings.Contains(p.Log(), "process.sched_slice not applied") {
		t.Skipf("the kernel cannot be asked: %s", p.Log())
	}
	require.Contains(t, p.Log(), "time slice of 300µs")
	got := slices(p.cmd.Process.Pid)
	require.NotEmpty(t, got)
	for _, s := range got {
		require.Equal(t, "300000", s, "every thread's slice (ns): %v", got)
	}
	q := startServer(t, nil, "-dev", "-addr", "127.0.0.1:0")
	for _, s := range slices(q.cmd.Process.Pid) {
		require.NotEqual(t, "300000", s)
	}
}

// TestServerDev: -dev runs with nothing else installed (an in-process
// Redis), says loudly that it keeps nothing, and a newcomer's first
// schedule and reserve work.
func TestServerDev(t *testing.T) {
	p := startServer(t, nil, "-dev", "-addr", "127.0.0.1:0", "-pull", "hello")
	require.Contains(t, p.Log(), "keeps NOTHING")
	require.Equal(t, 201, call(t, "POST", p.URL+"/v1/jobs/hello", "", map[string]any{"id": "1", "payload": "world", "delay_ms": 100}, nil))
	var out struct {
		Jobs []struct{ ID, Payload, Token string }
	}
	require.Equal(t, 200, call(t, "POST", p.URL+"/v1/reserve", "", map[string]any{"topics": []string{"hello"}, "wait_ms": 10000}, &out))
	require.Len(t, out.Jobs, 1)
	require.Equal(t, "world", out.Jobs[0].Payload)
}
