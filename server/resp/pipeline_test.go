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

	"github.com/wheelq/wheelq/server/config"
	"github.com/wheelq/wheelq/server/internal/servertest"
)

// TestPipelinedAcksShareARoundTrip: WQ.ACKs pipelined in one write are
// acked together, in a round trip or two to Redis, not one each (each
// waiting for the one before); every command of the pipeline is answered
// in order, a bad receipt among them with its own error, the commands
// after them as usual.
func TestPipelinedAcksShareARoundTrip(t *testing.T) {
	t.Parallel()
	rdb, addr := pipelineServerAt(t, redis.Options{}, func(c *config.Config) { c.Queue.Pull = []string{"acks"} })
	ctx := context.Background()
	const n = 100
	for i := range n {
		require.NoError(t, rdb.Do(ctx, "WQ.SCHEDULE", "acks", "p", "ID", fmt.Sprint("pipelined-ack-", i)).Err())
	}
	var got [][]any
	for len(got) < n {
		res, err := rdb.Do(ctx, "WQ.RESERVE", "COUNT", n, "BLOCK", 5000, "TOPICS", "acks").Slice()
		require.NoError(t, err)
		for _, j := range res {
			got = append(got, j.([]any))
		}
	}
	// The scripts that carry these jobs, from Redis's own MONITOR: the
	// queue's other calls meanwhile (leases, polls, figures) are more on
	// a busy machine, and are not the acks'.
	scriptsWith := monitorScripts(t, addr)
	pipe := rdb.Pipeline()
	var cmds []*redis.Cmd
	for i, j := range got {
		token := j[2]
		if i == 50 {
			token = "not-the-token"
		}
		cmds = append(cmds, pipe.Do(ctx, "WQ.ACK", j[0], j[1], token))
	}
	ping := pipe.Ping(ctx)
	again := pipe.Do(ctx, "WQ.ACK", got[0][0], got[0][1], got[0][2]) // sent again after it applied
	_, _ = pipe.Exec(ctx)
	scripts := scriptsWith("pipelined-ack-")
	for i, c := range cmds {
		if i == 50 {
			require.ErrorContains(t, c.Err(), "RESERVATIONLOST ", "ack %d", i)
			continue
		}
		require.NoError(t, c.Err(), "ack %d", i)
		require.Equal(t, "OK", c.Val(), "ack %d", i)
	}
	require.NoError(t, ping.Err())
	require.NoError(t, again.Err(), "an ack sent again is recognised")
	// One at a time, the 100 acks made 100 script calls at least.
	require.Less(t, scripts, 10, "Redis scripts run for %d pipelined acks", n+1)
	t.Logf("Redis scripts run for %d pipelined acks: %d", n+1, scripts)
}

// TestPipelinedSchedulesShareARoundTrip: WQ.SCHEDULEs pipelined in one
// write are written together (ScheduleBatch), not one round trip each,
// and answered in order as if one at a time: a bad one gets its error,
// an id named twice gets DUPLICATE the second time (REPLACE replaces),
// each job is stored with its own payload.
func TestPipelinedSchedulesShareARoundTrip(t *testing.T) {
	t.Parallel()
	rdb, calls := pipelineServer(t, redis.Options{}, func(c *config.Config) { c.Queue.Pull = []string{"t"} })
	ctx := context.Background()
	const n = 200
	before := calls()
	pipe := rdb.Pipeline()
	var cmds []*redis.Cmd
	for i := range n {
		switch i {
		case 7:
			cmds = append(cmds, pipe.Do(ctx, "WQ.SCHEDULE", "t", "bad", "DELAY", "soon"))
		case 9:
			cmds = append(cmds, pipe.Do(ctx, "WQ.SCHEDULE", "t", "again", "ID", "j3", "DELAY", 3600000))
		case 11:
			cmds = append(cmds, pipe.Do(ctx, "WQ.SCHEDULE", "t", "replaced", "ID", "j4", "DELAY", 3600000, "REPLACE"))
		default:
			cmds = append(cmds, pipe.Do(ctx, "WQ.SCHEDULE", "t", fmt.Sprint("p", i), "ID", fmt.Sprint("j", i), "DELAY", 3600000))
		}
	}
	ping := pipe.Ping(ctx)
	_, _ = pipe.Exec(ctx)
	writes := calls() - before
	for i, c := range cmds {
		switch i {
		case 7:
			require.ErrorContains(t, c.Err(), "ERR ", "job %d", i)
		case 9:
			require.ErrorContains(t, c.Err(), "DUPLICATE ", "job %d: j3 was scheduled before it in the pipeline", i)
		case 11:
			require.NoError(t, c.Err(), "job %d", i)
			require.Equal(t, "j4", c.Val())
		default:
			require.NoError(t, c.Err(), "job %d", i)
			require.Equal(t, fmt.Sprint("j", i), c.Val(), "job %d", i)
		}
	}
	require.NoError(t, ping.Err())
	for _, id := range []string{"j0", "j3", "j4", "j199"} {
		res, err := rdb.Do(ctx, "WQ.GET", "t", id).Result()
		require.NoError(t, err, id)
		want := "p" + id[1:]
		if id == "j4" {
			want = "replaced"
		}
		require.Contains(t, fmt.Sprint(res), want, id)
	}
	// One at a time, each WQ.SCHEDULE waited for the round trip of the
	// one before: 200 writes at least.
	require.Less(t, writes, n/2, "Redis writes for %d pipelined WQ.SCHEDULEs", n)
	t.Logf("Redis writes for %d pipelined WQ.SCHEDULEs: %d", n, writes)
}

// pipelineServer starts a server with a RESP front end, changed by edit,
// and returns a client of it (with o's options; closed when the test
// ends) and a count of its Redis's write round trips (writeCalls).
func pipelineServer(t *testing.T, o redis.Options, edit func(*config.Config)) (*redis.Client, func() int) {
	rdb, redisAddr := pipelineServerAt(t, o, edit)
	return rdb, writeCalls(t, redisAddr)
}

// pipelineServerAt is pipelineServer, with its Redis's address.
func pipelineServerAt(t *testing.T, o redis.Options, edit func(*config.Config)) (*redis.Client, string) {
	a := servertest.Start(t, func(c *config.Config) {
		c.RESP.Addr = "127.0.0.1:0"
		edit(c)
	})
	o.Addr = a.RESP
	rdb := redis.NewClient(&o)
	t.Cleanup(func() { rdb.Close() })
	return rdb, a.Redis
}

// monitorScripts starts watching the redis-server at addr (MONITOR) and
// returns a function that counts the EVALSHA calls it served since then
// whose arguments hold word: it sends a marker command and reads the
// stream up to it, so every call made before it is counted.
func monitorScripts(t *testing.T, addr string) func(word string) int {
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	_, err = nc.Write([]byte("MONITOR\r\n"))
	require.NoError(t, err)
	br := bufio.NewReader(nc)
	first, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", first)
	return func(word string) int {
		marker := fmt.Sprintf("monitor-marker-%d", time.Now().UnixNano())
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		require.NoError(t, c.Echo(context.Background(), marker).Err())
		require.NoError(t, nc.SetReadDeadline(time.Now().Add(30*time.Second)))
		n := 0
		for {
			l, err := br.ReadString('\n')
			require.NoError(t, err, "MONITOR's stream")
			if strings.Contains(l, marker) {
				return n
			}
			if strings.Contains(l, `"evalsha"`) && strings.Contains(l, word) {
				n++
			}
		}
	}
}

// delayedQueue turns the delayedqueue mode on, queues "q" and "t" pulled.
func delayedQueue(c *config.Config) {
	c.RESP.DelayedQueue = true
	c.Queue.Pull = []string{"q", "t"}
}

// writeCalls returns a function that counts the write round trips
// (EVALSHA and EXEC calls) the redis-server at addr has served so far.
func writeCalls(t *testing.T, addr string) func() int {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	return func() int {
		info, err := rdb.Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		total := 0
		for _, l := range strings.Split(info, "\n") {
			l = strings.TrimSpace(l)
			for _, cmd := range []string{"evalsha", "exec"} {
				if rest, ok := strings.CutPrefix(l, "cmdstat_"+cmd+":calls="); ok {
					v, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
					total += v
				}
			}
		}
		return total
	}
}

// TestPipelinedSAddsShareARoundTrip: delayedqueue's SADDs pipelined in one
// write are scheduled together, not one round trip each, and answered in
// order: each with its count, a bad one with its error.
func TestPipelinedSAddsShareARoundTrip(t *testing.T) {
	t.Parallel()
	rdb, calls := pipelineServer(t, redis.Options{}, delayedQueue)
	ctx := context.Background()
	const n = 100
	before := calls()
	pipe := rdb.Pipeline()
	var cmds []*redis.Cmd
	for i := range n {
		switch i {
		case 5:
			cmds = append(cmds, pipe.Do(ctx, "SADD", "q", "a", "10", "b")) // odd: a syntax error
		case 6:
			cmds = append(cmds, pipe.Do(ctx, "SADD", "q", "a", "60000", "b", "60000", "c", "60000"))
		default:
			cmds = append(cmds, pipe.Do(ctx, "SADD", "q", fmt.Sprint("p", i), 60000))
		}
	}
	_, _ = pipe.Exec(ctx)
	writes := calls() - before
	for i, c := range cmds {
		switch i {
		case 5:
			require.ErrorContains(t, c.Err(), "ERR syntax error", "SADD %d", i)
		case 6:
			require.NoError(t, c.Err())
			require.EqualValues(t, 3, c.Val())
		default:
			require.NoError(t, c.Err(), "SADD %d", i)
			require.EqualValues(t, 1, c.Val(), "SADD %d", i)
		}
	}
	card, err := rdb.Do(ctx, "SCARD", "q").Int()
	require.NoError(t, err)
	require.Equal(t, n-2+3, card, "every job stored")
	require.Less(t, writes, n/2, "Redis writes for %d pipelined SADDs", n)
	t.Logf("Redis writes for %d pipelined SADDs: %d", n, writes)
}

// TestPipelinesAnswerEveryCommand: random pipelines mixing the commands
// run together (WQ.SCHEDULE, WQ.ACK, SADD) with others, valid and not
// (bad options, wrong arity, unknown names, stale tokens): every command
// gets its own reply, in order (a PING's PONG where it stands, a
// schedule's id where it stands), and the server serves on.
func TestPipelinesAnswerEveryCommand(t *testing.T) {
	t.Parallel()
	rdb, _ := pipelineServer(t, redis.Options{Protocol: 2}, delayedQueue)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	type sent struct {
		cmd  *redis.Cmd
		kind string
		want string // the reply that must come, if known
	}
	for round := range 40 {
		pipe := rdb.Pipeline()
		var cmds []sent
		for i := range 1 + rng.IntN(60) {
			id := fmt.Sprint("r", round, "-", i)
			switch k := rng.IntN(9); k {
			case 0, 1, 2:
				cmds = append(cmds, sent{pipe.Do(ctx, "WQ.SCHEDULE", "t", "p", "ID", id, "DELAY", 3600000), "schedule", id})
			case 3:
				cmds = append(cmds, sent{pipe.Do(ctx, "WQ.SCHEDULE", "t", "p", "DELAY", "soon"), "bad schedule", ""})
			case 4:
				cmds = append(cmds, sent{pipe.Do(ctx, "WQ.ACK", "q", id, "no-such-token"), "stale ack", ""})
			case 5:
				cmds = append(cmds, sent{pipe.Do(ctx, "SADD", "q", "x", 3600000), "sadd", ""})
			case 6:
				cmds = append(cmds, sent{pipe.Do(ctx, "PING", id), "ping", id})
			case 7:
				cmds = append(cmds, sent{pipe.Do(ctx, "WQ.ACK", "q", id), "ack arity", ""})
			default:
				cmds = append(cmds, sent{pipe.Do(ctx, "NO.SUCH", id), "unknown", ""})
			}
		}
		_, _ = pipe.Exec(ctx)
		for i, s := range cmds {
			err := s.cmd.Err()
			switch s.kind {
			case "schedule", "ping":
				require.NoError(t, err, "round %d command %d (%s)", round, i, s.kind)
				require.Equal(t, s.want, s.cmd.Val(), "round %d command %d (%s): a reply out of place", round, i, s.kind)
			case "sadd":
				require.NoError(t, err, "round %d command %d", round, i)
				require.EqualValues(t, 1, s.cmd.Val())
			case "bad schedule", "ack arity", "unknown":
				require.ErrorContains(t, err, "ERR ", "round %d command %d (%s)", round, i, s.kind)
			case "stale ack":
				require.ErrorContains(t, err, "RESERVATIONLOST ", "round %d command %d", round, i)
			}
		}
	}
	require.NoError(t, rdb.Ping(ctx).Err())
}
