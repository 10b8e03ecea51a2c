package server_test

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/server/auth"
)

// TestServerRedisDown: with Redis gone, requests fail fast with 503
// unavailable (or 504 outcome_unknown for one whose reply was lost), never
// hang; /readyz says not ready; when Redis is back, everything works again
// by itself.
func TestServerRedisDown(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{AOF: true})
	rs.RequireReal(t)
	p := startServer(t, nil, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-pull", "q", "-set", "log.access=false")
	require.Equal(t, 201, call(t, "POST", p.URL+"/v1/jobs/q", "", map[string]any{"id": "before", "delay_ms": 3600e3}, nil))
	rs.Stop()

	codes := map[string]int{}
	for i := range 20 {
		start := time.Now()
		var out struct{ Error struct{ Code string } }
		st := call(t, "POST", p.URL+"/v1/jobs/q", "", map[string]any{"id": "down" + string(rune('a'+i)), "delay_ms": 3600e3}, &out)
		require.Contains(t, []int{503, 504}, st, "Redis down: %d %s", st, out.Error.Code)
		codes[out.Error.Code]++
		if i > 0 {
			require.Less(t, time.Since(start), 2*time.Second, "a request while Redis is known down fails at once")
		}
	}
	require.Positive(t, codes["unavailable"], "%v", codes)
	var h map[string]string
	require.Equal(t, 503, call(t, "GET", p.URL+"/readyz", "", nil, &h))
	require.Contains(t, h["reason"], "redis")
	require.NotContains(t, h["reason"], "127.0.0.1", "an unauthenticated probe learns no address (the log has it)")
	require.Contains(t, p.Log(), "127.0.0.1", "the log says what failed")

	require.NoError(t, rs.Restart())
	waitFor(t, func() bool {
		return call(t, "POST", p.URL+"/v1/jobs/q", "", map[string]any{"id": "after", "delay_ms": 3600e3}, nil) == 201
	})
	var info map[string]any
	require.Equal(t, 200, call(t, "GET", p.URL+"/v1/jobs/q/before", "", nil, &info), "an acknowledged job survived (AOF)")
	waitFor(t, func() bool { return call(t, "GET", p.URL+"/readyz", "", nil, nil) == 200 })
}

// TestServerReplicaDown: with redis.replica_acks, a replica that stops
// acknowledging makes /readyz say not ready (a load balancer then sends
// writes elsewhere), every write answers 504 outcome_unknown, and both
// recover once the replica is back. (Found by a red team on a Sentinel
// set with the defaults: writes 504 for as long as the replica was down,
// /readyz 200 throughout, nothing in the log.)
func TestServerReplicaDown(t *testing.T) {
	primary := redistest.Start(t, redistest.Options{})
	primary.RequireReal(t)
	replica := primary.StartReplica(t)
	p := startServer(t, nil, "-addr", "127.0.0.1:0", "-redis-url", redisURL(primary), "-pull", "q",
		"-set", "redis.replica_acks=1", "-set", "redis.replica_timeout=300ms")
	require.Equal(t, 201, call(t, "POST", p.URL+"/v1/jobs/q", "", map[string]any{"id": "before", "delay_ms": 3600e3}, nil))

	replica.Kill()
	var h map[string]string
	waitFor(t, func() bool { return call(t, "GET", p.URL+"/readyz", "", nil, &h) == 503 })
	require.Equal(t, "redis replicas not acknowledging writes", h["reason"])
	// The log is read from the process's pipe: the line may trail the reply.
	waitFor(t, func() bool { return strings.Contains(p.Log(), "redis.replica_acks") }) // the log says which setting
	var out struct{ Error struct{ Code string } }
	require.Equal(t, 504, call(t, "POST", p.URL+"/v1/jobs/q", "", map[string]any{"id": "during", "delay_ms": 3600e3}, &out))
	require.Equal(t, "outcome_unknown", out.Error.Code)

	require.NoError(t, replica.Restart())
	waitFor(t, func() bool { return call(t, "GET", p.URL+"/readyz", "", nil, nil) == 200 })
	require.Equal(t, 201, call(t, "POST", p.URL+"/v1/jobs/q", "", map[string]any{"id": "after", "delay_ms": 3600e3}, nil))
}

// TestServerEdges: oversized headers are refused (431, with the API's
// JSON error and code); /metrics and the
// dashboard need a token (the dashboard asks a browser for it as a Basic
// password); the dashboard's page and its API answer with one.
func TestServerEdges(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	tok, sum, err := auth.Generate("ops")
	require.NoError(t, err)
	vtok, vsum, err := auth.Generate("viewer")
	require.NoError(t, err)
	cfg := filepath.Join(t.TempDir(), "wheelq-server.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(`
[http]
max_header_bytes = 4096
[[token]]
id = "ops"
sha256 = "`+sum+`"
admin = ["*"]
[[token]]
id = "viewer"
sha256 = "`+vsum+`"
produce = ["orders.*"]
`), 0o600))
	p := startServer(t, nil, "-config", cfg, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs))

	get := func(path string, hdr map[string]string) (int, http.Header, string) {
		req, err := http.NewRequest("GET", p.URL+path, nil)
		require.NoError(t, err)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	// Past max_header_bytes: the API's JSON error with its code; past
	// twice that, net/http's own refusal (it reads no further).
	st, h, body := get("/healthz", map[string]string{"X-Big": strings.Repeat("x", 5000)})
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, st)
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Contains(t, body, `"code":"too_large"`)
	require.Contains(t, body, "http.max_header_bytes")
	st, _, _ = get("/healthz", map[string]string{"X-Big": strings.Repeat("x", 3500)})
	require.Equal(t, 200, st, "a head within the limit")
	st, _, _ = get("/healthz", map[string]string{"X-Big": strings.Repeat("x", 64<<10)})
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, st)

	st, h, body = get("/metrics", nil)
	require.Equal(t, 401, st)
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Contains(t, body, `"code":"unauthorized"`)
	st, _, body = get("/metrics", map[string]string{"Authorization": "Bearer " + vtok})
	require.Equal(t, 403, st, "metrics need admin on every topic")
	require.Contains(t, body, `"code":"forbidden"`)
	st, _, body = get("/metrics", map[string]string{"Authorization": "Bearer " + tok})
	require.Equal(t, 200, st)
	require.Contains(t, body, "wheelq_owned_partitions")
	// The process's own: its heap and collections, CPU, memory and files.
	for _, name := range []string{"go_memstats_alloc_bytes_total", "go_gc_duration_seconds", "go_goroutines", "process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"} {
		require.Contains(t, body, "\n"+name, "/metrics has %s", name)
	}

	st, h, body = get("/ui/", nil)
	require.Equal(t, 401, st)
	require.Contains(t, h.Get("WWW-Authenticate"), "Basic")
	require.Contains(t, body, `"code":"unauthorized"`)
	basic := func(tk string) map[string]string {
		return map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("me:"+tk))}
	}
	st, _, body = get("/ui/", basic(tok))
	require.Equal(t, 200, st)
	require.Contains(t, body, "wheelq server")
	st, h, body = get("/ui/", basic("wq_ops_wrong"))
	require.Equal(t, 401, st, "a mistyped token is asked for again")
	require.Contains(t, h.Get("WWW-Authenticate"), "Basic")
	require.Contains(t, body, `"code":"unauthorized"`)
	st, _, _ = get("/ui/", basic(vtok))
	require.Equal(t, 403, st, "the namespace's page needs admin on every topic")
	// The dashboard's endpoints need what the API's do: lists and counts
	// admin (GET /v1/jobs, /v1/counts), one job any right on its topic.
	// (Found by a red team: a produce token listed a topic's jobs here.)
	st, _, _ = get("/ui/api/jobs?topic=orders.x", basic(vtok))
	require.Equal(t, 403, st, "a list needs admin")
	st, _, _ = get("/ui/api/timeline?topic=orders.x&window=hour", basic(vtok))
	require.Equal(t, 403, st, "the timeline needs admin")
	st, _, _ = get("/ui/api/job?topic=orders.x&id=nope", basic(vtok))
	require.Equal(t, 404, st, "one job: any right on its topic")
}

// TestServerNotStarted: with queue.start false (what "wheelq serve" was)
// the server takes no partition and runs nothing, but schedules, shows
// jobs and serves the dashboard; it refuses pulled topics; it stops
// cleanly.
func TestServerNotStarted(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	out, err := exec.Command(binary, "-set", "queue.start=false", "-pull", "x", "-redis-url", redisURL(rs)).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "queue.start")

	p := startServer(t, nil, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-set", "queue.start=false", "-set", "http.ui_read_only=true")
	require.Equal(t, 201, call(t, "POST", p.URL+"/v1/jobs/orders", "", map[string]any{"id": "o1", "delay_ms": 10}, nil))
	time.Sleep(300 * time.Millisecond)
	var info map[string]any
	require.Equal(t, 200, call(t, "GET", p.URL+"/v1/jobs/orders/o1", "", nil, &info))
	require.Equal(t, "pending", info["state"], "nobody runs it")
	resp, err := http.Get(p.URL + "/ui/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	var counts struct{ Topics []map[string]any }
	require.Equal(t, 200, call(t, "GET", p.URL+"/v1/counts", "", nil, &counts))
	require.Len(t, counts.Topics, 1)
	require.Contains(t, p.Log(), "started=false")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.exited(wait), "%s", p.Log())
}

// TestServerStartedRefusesUnrunTopics: a started server schedules only
// the topics it pulls or pushes: a job, a batch entry, a recurring
// schedule or a RESP WQ.SCHEDULE of another topic is refused with
// topic_mode before anything is stored (before, it was taken, failed "no
// handler" at each attempt and was dead-lettered).
func TestServerStartedRefusesUnrunTopics(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	p := startServer(t, nil, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-pull", "orders", "-set", "resp.addr=127.0.0.1:0")
	var e struct {
		Error struct{ Code, Message string }
	}
	require.Equal(t, 409, call(t, "POST", p.URL+"/v1/jobs/ordres", "", map[string]any{"id": "o1"}, &e))
	require.Equal(t, "topic_mode", e.Error.Code)
	require.Contains(t, e.Error.Message, `"ordres"`)
	require.Equal(t, 201, call(t, "POST", p.URL+"/v1/jobs/orders", "", map[string]any{"id": "o1", "delay_ms": 60000}, nil))
	var batch struct {
		Results []struct {
			Status int
			Error  *struct{ Code string }
		}
		Failed int
	}
	require.Equal(t, 200, call(t, "POST", p.URL+"/v1/batch", "", map[string]any{"jobs": []map[string]any{
		{"topic": "orders", "id": "o2", "delay_ms": 60000}, {"topic": "ordres", "id": "o3"}}}, &batch))
	require.Equal(t, 1, batch.Failed)
	require.Equal(t, 409, batch.Results[1].Status)
	require.Equal(t, "topic_mode", batch.Results[1].Error.Code)
	require.Equal(t, 409, call(t, "PUT", p.URL+"/v1/recurring/nightly", "", map[string]any{"topic": "ordres", "every_ms": 60000}, &e))
	require.Equal(t, "topic_mode", e.Error.Code)
	// Said in the server's terms, not the library's Config field.
	require.Contains(t, e.Error.Message, `"ordres" is neither pulled nor pushed by this server (queue.pull, [[push.topic]])`)
	require.NotContains(t, e.Error.Message, "Config.")
	rdb := redis.NewClient(&redis.Options{Addr: respAddr(t, p), Protocol: 2})
	defer rdb.Close()
	require.ErrorContains(t, rdb.Do(context.Background(), "WQ.SCHEDULE", "ordres", "x").Err(), "TOPICMODE ")
	for _, id := range []string{"o1", "o3"} {
		require.Equal(t, 404, call(t, "GET", p.URL+"/v1/jobs/ordres/"+id, "", nil, nil), "nothing stored")
	}
}

// TestServerStartedRefusesUnrunRequeue: a started server refuses, with
// 409 topic_mode as it refuses scheduling one, to requeue a dead job of
// a topic it neither pulls nor pushes (one dead-lettered by an earlier
// configuration, say): brought back, it could only fail "no handler"
// until it was dead again. The job stays dead. (Seen failing before
// Requeue checked Config.RefuseUnhandled: 204, the job pending.)
func TestServerStartedRefusesUnrunRequeue(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	// An earlier worker of the namespace handled "ordres" and gave its job up.
	q, err := wheelq.New(rs.Client(t), wheelq.Config{Namespace: "default", Partitions: 16})
	require.NoError(t, err)
	require.NoError(t, q.Handle("ordres", wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error {
		return wheelq.Permanent(errors.New("gave up"))
	})))
	require.NoError(t, q.Start(ctx))
	_, err = q.Schedule(ctx, "ordres", nil, wheelq.ID("d1"))
	require.NoError(t, err)
	waitFor(t, func() bool {
		info, err := q.Lookup(ctx, "ordres", "d1")
		return err == nil && info.State == wheelq.StateDead
	})
	require.NoError(t, q.Shutdown(ctx))

	p := startServer(t, nil, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-pull", "orders")
	var e struct {
		Error struct{ Code, Message string }
	}
	require.Equal(t, 409, call(t, "POST", p.URL+"/v1/jobs/ordres/d1/requeue", "", map[string]any{}, &e))
	require.Equal(t, "topic_mode", e.Error.Code)
	require.Contains(t, e.Error.Message, `"ordres"`)
	var info map[string]any
	require.Equal(t, 200, call(t, "GET", p.URL+"/v1/jobs/ordres/d1", "", nil, &info))
	require.Equal(t, "dead", info["state"], "left dead")
}
