package persist

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// envCallgrindDir names the directory into which scripts/redis-instructions
// has the redis-server it starts under valgrind's callgrind write its
// counts; TestRedisInstructions runs only when it is set.
const envCallgrindDir = "WHEELQ_CALLGRIND_DIR"

// TestRedisInstructions counts the instructions Redis spends in the
// firing scripts (claim.lua, then settle.lua's acks with the run history)
// per job, with callgrind: the same count on every run of the same Redis,
// scripts and inputs, whatever else the machine is doing, where the time
// BenchmarkFiringScripts reports moves with the machine's noise. Jobs come
// in claims of 10 (a few a partition, as at 10,000 jobs a second) and of
// 100, with a run history still filling and with one full (trimmed by
// count), and with none. Run it with scripts/redis-instructions.
func TestRedisInstructions(t *testing.T) {
	dir := os.Getenv(envCallgrindDir)
	if dir == "" {
		t.Skip("run by scripts/redis-instructions (valgrind's callgrind)")
	}
	for _, c := range []struct {
		batch, history int
		name           string
	}{
		{10, 0, "off"},
		{10, 1_000_000, "filling"},
		{10, warmJobs, "full"},
		{100, 1_000_000, "filling"},
		{100, warmJobs, "full"},
	} {
		t.Run(fmt.Sprintf("claims=%d/history=%s", c.batch, c.name), func(t *testing.T) {
			per := firingInstructions(t, dir, c.batch, c.history)
			t.Logf("claims of %d, history %s: %d instructions of Redis per job", c.batch, c.name, per)
		})
	}
}

// warmJobs are claimed and acked before the count: 600 a partition, so
// that every partition's history hash and index are past Redis's compact
// encodings (512 and 128 entries), as in a queue that has run a while.
const warmJobs = 16 * 600

// firingInstructions claims and acks jobs in batches of batch on a Redis
// run under callgrind, and returns the instructions counted in its
// scripts (EVAL's own and the commands they call) per job.
func firingInstructions(t *testing.T, dir string, batch, history int) int64 {
	const n = 10_000
	bb := setup(t, 16)
	s, err := New(bb.rdb, Options{Namespace: "ins", Partitions: 16, HistoryCount: history, HistoryAge: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.Init(bb.ctx))
	info, err := bb.rdb.InfoMap(bb.ctx, "server").Result()
	require.NoError(t, err)
	pid := info["Server"]["process_id"]
	control := func(arg string) {
		out, err := exec.Command("callgrind_control", arg, pid).CombinedOutput()
		require.NoError(t, err, "callgrind_control %s: %s", arg, out)
	}
	// Fenced, as a worker's calls are: each partition's lease holds its
	// token, which every call checks.
	tokens := make([]string, 16)
	for p := range tokens {
		tokens[p] = fmt.Sprintf("owner-%d", p)
		require.NoError(t, bb.rdb.Set(bb.ctx, s.Keys(p).Lease, tokens[p], 0).Err())
	}
	reqs := firingJobs(t, bb, s, warmJobs+n)
	claimAndAck(t, bb, s, tokens, reqs[:warmJobs], 100)
	control("-z")
	claimAndAck(t, bb, s, tokens, reqs[warmJobs:], batch)
	control("-d")
	dumps, err := filepath.Glob(filepath.Join(dir, "cg."+pid+".*"))
	require.NoError(t, err)
	require.Len(t, dumps, 1, "one dump")
	raw, err := os.ReadFile(dumps[0])
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "summary: "); ok {
			total, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			require.NoError(t, err)
			return total / n
		}
	}
	t.Fatalf("no summary in %s", dumps[0])
	return 0
}
