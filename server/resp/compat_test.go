package resp_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/config"
	"github.com/wheelq/wheelq/server/internal/servertest"
	"github.com/wheelq/wheelq/server/resp"
)

// startCompat runs a server with the delayedqueue mode on, pulling topics.
func startCompat(t *testing.T, pull ...string) string {
	t.Helper()
	return servertest.Start(t, func(c *config.Config) {
		c.RESP.Addr = "127.0.0.1:0"
		c.RESP.DelayedQueue = true
		c.Queue.Pull = pull
	}).RESP
}

// TestDelayedQueueREADME runs delayedqueue's README session with
// redis-cli (its delays cut tenfold): nothing before its time, each
// payload once, in due order; KEYS, SCARD and DEL, which it lacked, too.
func TestDelayedQueueREADME(t *testing.T) {
	t.Parallel()
	needRedisCLI(t)
	cli := redisCLI(t, startCompat(t, "my_queue", "other"))
	start := time.Now()
	require.Equal(t, "1", cli("sadd", "my_queue", "data_delays_10_seconds", "1000"))
	require.Equal(t, "1", cli("sadd", "my_queue", "data_delays_1_seconds", "100"))
	require.Equal(t, "1", cli("sadd", "my_queue", "data_delays_5_seconds", "500"))
	require.Equal(t, "my_queue", cli("keys"))
	require.Equal(t, "my_queue", cli("keys", "my_*"))
	require.Equal(t, "", cli("keys", "nope*"))
	require.Equal(t, "3", cli("scard", "my_queue"))
	if time.Since(start) < 90*time.Millisecond {
		require.Equal(t, "", cli("spop", "my_queue", "10"), "none due yet")
	}
	// Pop until each came, checking none before its time: a busy machine
	// may queue a due job to its topic a little after its time, so one
	// call need not return every job due by then.
	due := map[string]time.Duration{"data_delays_1_seconds": 100 * time.Millisecond,
		"data_delays_5_seconds": 500 * time.Millisecond, "data_delays_10_seconds": time.Second}
	var order []string
	time.Sleep(time.Until(start.Add(600 * time.Millisecond)))
	for deadline := time.Now().Add(wait); len(order) < 3 && time.Now().Before(deadline); {
		out := cli("spop", "my_queue", "10")
		at := time.Since(start)
		if out == "" {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		for _, p := range strings.Split(out, "\n") {
			require.GreaterOrEqual(t, at, due[p], "%s before its time", p)
			order = append(order, p)
		}
	}
	require.Equal(t, []string{"data_delays_1_seconds", "data_delays_5_seconds", "data_delays_10_seconds"}, order, "each once, in due order")
	require.Equal(t, "", cli("spop", "my_queue", "10"), "each once")
	require.Equal(t, "0", cli("scard", "my_queue"))

	// DEL cancels a queue's pending jobs.
	require.Equal(t, "2", cli("sadd", "other", "a", "60000", "b", "60000"))
	require.Equal(t, "2", cli("scard", "other"))
	require.Equal(t, "1", cli("del", "other", "my_queue"))
	require.Equal(t, "0", cli("scard", "other"))
}

// TestDelayedQueueQuickStart runs delayedqueue's Go quick start (go-redis:
// SAdd with a delay in ms, SPopN 1000 at a time, sleeping 300 ms when none
// is due) with its delays cut sixty-fold: every message once, none before
// its time; a popped job is done (at most once: acked before the reply).
func TestDelayedQueueQuickStart(t *testing.T) {
	t.Parallel()
	addr := startCompat(t, "queue_name")
	ctx := context.Background()
	const n = 300
	producer := redis.NewClient(&redis.Options{Addr: addr})
	defer producer.Close()
	due := map[string]time.Time{}
	for j := range n {
		millis := rand.Int32N(1000) + 17
		data := "Value " + strconv.Itoa(j)
		due[data] = time.Now().Add(time.Duration(millis) * time.Millisecond)
		require.NoError(t, producer.SAdd(ctx, "queue_name", data, strconv.Itoa(int(millis))).Err())
	}
	consumer := redis.NewClient(&redis.Options{Addr: addr})
	defer consumer.Close()
	seen := map[string]bool{}
	deadline := time.Now().Add(wait)
	for len(seen) < n {
		require.True(t, time.Now().Before(deadline), "got %d of %d", len(seen), n)
		m := consumer.SPopN(ctx, "queue_name", 1000)
		if redis.Nil == m.Err() || len(m.Val()) == 0 {
			require.NoError(t, m.Err())
			time.Sleep(300 * time.Millisecond)
			continue
		}
		now := time.Now()
		for _, msg := range m.Val() {
			require.False(t, seen[msg], "%s twice", msg)
			seen[msg] = true
			require.False(t, now.Before(due[msg].Truncate(time.Millisecond)), "%s early", msg)
		}
	}
	require.Equal(t, int64(0), consumer.SCard(ctx, "queue_name").Val())
}

// TestDelayedQueueErrors: the mode's commands refuse bad input with
// Redis's conventions, and do not exist with the mode off.
func TestDelayedQueueErrors(t *testing.T) {
	t.Parallel()
	addr := startCompat(t, "q")
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	require.ErrorContains(t, rdb.Do(ctx, "SADD", "q", "a").Err(), "ERR wrong number of arguments")
	require.ErrorContains(t, rdb.Do(ctx, "SADD", "q", "a", "10", "b").Err(), "ERR syntax error")
	require.ErrorContains(t, rdb.Do(ctx, "SADD", "q", "a", "-1").Err(), "ERR delay")
	require.ErrorContains(t, rdb.Do(ctx, "SPOP", "q", "1001").Err(), "ERR count")
	require.ErrorContains(t, rdb.Do(ctx, "SPOP", "unpulled").Err(), "TOPICMODE ")
	require.ErrorContains(t, rdb.Do(ctx, "KEYS", "[").Err(), "ERR bad pattern")
	many := []any{"DEL"}
	for i := range 101 {
		many = append(many, fmt.Sprint("q", i))
	}
	require.ErrorContains(t, rdb.Do(ctx, many...).Err(), "ERR DEL takes at most 100 queues")
	// A bad or empty name is refused before any queue is touched: "" was
	// taken for every queue, and a bad second name left the first
	// emptied (found by a red team).
	require.NoError(t, rdb.Do(ctx, "SADD", "q", "kept", "600000").Err())
	require.ErrorContains(t, rdb.Do(ctx, "DEL", "").Err(), "ERR DEL")
	require.ErrorContains(t, rdb.Do(ctx, "DEL", "q", "a/b").Err(), "ERR DEL a/b")
	n, err := rdb.Do(ctx, "SCARD", "q").Int()
	require.NoError(t, err)
	require.Equal(t, 1, n, "nothing cancelled")
	require.ErrorIs(t, rdb.SPop(ctx, "q").Err(), redis.Nil, "SPOP without count: a null, as Redis's")
	require.NoError(t, rdb.SAdd(ctx, "q", "only", "0").Err())
	var v string
	require.Eventually(t, func() bool {
		var err error
		v, err = rdb.SPop(ctx, "q").Result()
		return err == nil
	}, wait, 5*time.Millisecond)
	require.Equal(t, "only", v)
	require.Empty(t, rdb.SPopN(ctx, "q", 0).Val())

	plain := redis.NewClient(&redis.Options{Addr: start(t, nil, "q")})
	defer plain.Close()
	require.ErrorContains(t, plain.Do(ctx, "SADD", "q", "a", "10").Err(), "ERR unknown command")
}

// TestShutdownLosesNoPoppedJob: a graceful stop while pipelined SPOPs
// run loses no job: each was either answered to the client or is still
// pending. (Found by a red team: SIGTERM 5-100 ms into 30 pipelined
// SPOPs of 1,000 lost 1,000-6,000 jobs, finished and never answered.)
func TestShutdownLosesNoPoppedJob(t *testing.T) {
	t.Parallel()
	q := startedQueue(t, "sdq")
	ctx := context.Background()
	const n = 20000
	jobs := make([]wheelq.BatchJob, n)
	for i := range jobs {
		jobs[i] = wheelq.BatchJob{Topic: "sdq", Payload: []byte(fmt.Sprint(i))}
	}
	for i := 0; i < n; i += wheelq.MaxBatchJobs {
		res, err := q.ScheduleBatch(ctx, jobs[i:i+wheelq.MaxBatchJobs])
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err)
		}
	}
	az, err := auth.New(nil, true)
	require.NoError(t, err)
	s := resp.New(q, func() *auth.Authorizer { return az }, resp.Options{MaxConns: 10, MaxCommandBytes: 1 << 20, MaxBlock: time.Minute, Timeout: 10 * time.Second, DelayedQueue: true})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = s.Serve(l) }()
	conn, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(wait)))
	got := 0
	pipeDone := make(chan struct{})
	go func() {
		defer close(pipeDone)
		// 30 SPOPs of 1,000 in one write, then each reply: an array of
		// payloads, or an error once the server stops. A raw client: a
		// go-redis pipeline gave some replies the server had written
		// before closing as EOF (seen in 1 run of 10).
		_, _ = conn.Write([]byte(strings.Repeat("*3\r\n$4\r\nSPOP\r\n$3\r\nsdq\r\n$4\r\n1000\r\n", 30)))
		rd := bufio.NewReader(conn)
		for range 30 {
			line, err := rd.ReadString('\n')
			if err != nil {
				return // closed: the rest were not answered
			}
			if line[0] != '*' {
				continue // -UNAVAILABLE
			}
			n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
			for range 2 * n { // $len and the payload of each
				if _, err := rd.ReadString('\n'); err != nil {
					return
				}
			}
			got += n
		}
	}()
	time.Sleep(30 * time.Millisecond) // some SPOPs under way
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(sctx))
	<-pipeDone
	counts, err := q.Counts(ctx)
	require.NoError(t, err)
	pending := 0
	for _, c := range counts {
		pending += int(c.Pending)
	}
	require.Equal(t, n, got+pending, "answered %d, pending %d: the rest were finished and never answered", got, pending)
}

// TestSPopPausedAndResumed: a paused queue pops nothing (a null, never
// -PAUSED), and once resumed its due jobs pop at once, not after the
// next recheck. (Found by a red team: -PAUSED a second after the pause,
// and SPOP answered null for about a second after WQ.RESUME.)
func TestSPopPausedAndResumed(t *testing.T) {
	t.Parallel()
	addr := startCompat(t, "pq")
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	require.NoError(t, rdb.Do(ctx, "WQ.PAUSE", "pq").Err())
	require.NoError(t, rdb.Do(ctx, "SADD", "pq", "held", "0").Err())
	for range 2 {
		require.ErrorIs(t, rdb.Do(ctx, "SPOP", "pq").Err(), redis.Nil, "paused: nothing")
		time.Sleep(1200 * time.Millisecond) // past the recheck
	}
	require.ErrorIs(t, rdb.Do(ctx, "SPOP", "pq").Err(), redis.Nil, "a fresh look just before the resume")
	require.NoError(t, rdb.Do(ctx, "WQ.RESUME", "pq").Err())
	start := time.Now()
	require.Eventually(t, func() bool {
		v, err := rdb.Do(ctx, "SPOP", "pq").Text()
		return err == nil && v == "held"
	}, 10*time.Second, 5*time.Millisecond)
	require.Less(t, time.Since(start), 800*time.Millisecond, "popped at once, not at the next second's recheck")

	// WQ.RESERVE without BLOCK likewise (it answers -PAUSED while paused).
	require.NoError(t, rdb.Do(ctx, "WQ.PAUSE", "pq").Err())
	require.NoError(t, rdb.Do(ctx, "SADD", "pq", "held2", "0").Err())
	time.Sleep(1200 * time.Millisecond)
	require.ErrorContains(t, rdb.Do(ctx, "WQ.RESERVE", "COUNT", 1, "TOPICS", "pq").Err(), "PAUSED")
	require.NoError(t, rdb.Do(ctx, "WQ.RESUME", "pq").Err())
	start = time.Now()
	require.Eventually(t, func() bool {
		v, err := rdb.Do(ctx, "WQ.RESERVE", "COUNT", 1, "TOPICS", "pq").Slice()
		return err == nil && len(v) == 1
	}, 10*time.Second, 5*time.Millisecond)
	require.Less(t, time.Since(start), 800*time.Millisecond, "reserved at once after the resume")

	// The job due before the pause, the pause and resume in quick
	// succession (the red team's sequence).
	require.NoError(t, rdb.Do(ctx, "SADD", "pq", "quick", "0").Err())
	require.NoError(t, rdb.Do(ctx, "WQ.PAUSE", "pq").Err())
	require.ErrorIs(t, rdb.Do(ctx, "SPOP", "pq").Err(), redis.Nil)
	require.NoError(t, rdb.Do(ctx, "WQ.RESUME", "pq").Err())
	start = time.Now()
	require.Eventually(t, func() bool {
		v, err := rdb.Do(ctx, "SPOP", "pq").Text()
		return err == nil && v == "quick"
	}, 10*time.Second, 5*time.Millisecond)
	require.Less(t, time.Since(start), 800*time.Millisecond, "popped at once after a quick pause and resume")
}
