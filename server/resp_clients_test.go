package server_test

import (
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

var respListening = regexp.MustCompile(`wheelq server: RESP listening" addr=([0-9.:]+)`)

// startRESP starts a server with the RESP front end on a free port and
// returns it with that port's address.
func startRESP(t *testing.T, pull string) (*proc, string) {
	t.Helper()
	rs := redistest.Start(t, redistest.Options{})
	p := startServer(t, nil, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-pull", pull, "-set", "resp.addr=127.0.0.1:0")
	return p, respAddr(t, p)
}

// respAddr waits until p's log says where its RESP front end listens,
// and returns that address.
func respAddr(t *testing.T, p *proc) string {
	t.Helper()
	var addr string
	waitFor(t, func() bool {
		m := respListening.FindStringSubmatch(p.Log())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

// TestRESPCommandRedisCLI: redis-cli (7) against a wheelq-server
// process reads COMMAND's subcommands as Redis's: COUNT an integer, INFO
// an entry per name asked (a nil for one wheelq does not have), DOCS a
// map (RESP3 too), an unknown subcommand Redis's error.
func TestRESPCommandRedisCLI(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		if os.Getenv(EnvRequireClients) != "" {
			t.Fatalf("redis-cli not installed (%s is set)", EnvRequireClients)
		}
		t.Skip("redis-cli not installed")
	}
	_, addr := startRESP(t, "cli")
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port, "--no-raw"}, args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.TrimSpace(string(out))
	}
	require.Regexp(t, `^\(integer\) [1-9][0-9]*$`, cli("COMMAND", "COUNT"))
	info := cli("COMMAND", "INFO", "wq.schedule", "get", "nosuch")
	require.Regexp(t, `(?s)^1\)\s+1\) "wq\.schedule"\n\s+2\) \(integer\) -3\n.*\n2\) \(nil\)\n3\) \(nil\)$`, info)
	require.Equal(t, 10, strings.Count(info, "\n")+1-2, "ten fields in wq.schedule's entry, then two nils:\n%s", info)
	docs := cli("COMMAND", "DOCS", "WQ.ACK")
	require.Equal(t, "1) \"wq.ack\"\n2) 1) \"summary\"\n   2) \"WQ.ACK topic id token\"", docs)
	require.Equal(t, "1# \"wq.ack\" => 1# \"summary\" => \"WQ.ACK topic id token\"", cli("-3", "COMMAND", "DOCS", "WQ.ACK"))
	require.Equal(t, "(error) ERR unknown subcommand 'nosuch'. Try COMMAND HELP.", cli("COMMAND", "nosuch"))
}

// TestRESPPython: redis-py (Debian's python3-redis) schedules, cancels,
// reserves with a block, nacks and acks through the RESP front end.
func TestRESPPython(t *testing.T) {
	t.Parallel()
	p, addr := startRESP(t, "py")
	out := runExampleEnv(t, []string{"WHEELQ_RESP=" + addr}, p, "", "/usr/bin/python3", "examples/resp/worker.py")
	if strings.Contains(out, "No module named 'redis'") {
		t.Fatal("python3-redis missing")
	}
	require.Contains(t, out, "ping True")
	require.Contains(t, out, "cancel job-2 1")
	require.Contains(t, out, "again job-1: DUPLICATE")
	require.Contains(t, out, "nacked job-1 attempt 1")
	require.Contains(t, out, `acked job-1 attempt 2 payload b'\x00binary\xff' early=False`)
	require.Contains(t, out, "state done attempts 2")
}

// TestRESPPHP: phpredis (Debian's php-redis) schedules, reserves with a
// block and acks; an error reply is the client's error.
func TestRESPPHP(t *testing.T) {
	t.Parallel()
	p, addr := startRESP(t, "php")
	out := runExampleEnv(t, []string{"WHEELQ_RESP=" + addr}, p, "", "php", "examples/resp/worker.php")
	require.Contains(t, out, "ping true")
	require.Contains(t, out, "scheduled 1001")
	require.Contains(t, out, "acked 1001 (order 1001) attempt 1: true")
	require.Contains(t, out, "cancel 1002: 1")
	require.Contains(t, out, "nacked 1003 attempt 1")
	require.Contains(t, out, "acked 1003 attempt 2")
	require.Contains(t, out, "cancel missing: NOTFOUND")
}

// TestRESPNode: node-redis (npm's "redis", installed by `npm ci` in
// examples/resp/node: .ci/run does) schedules, cancels, reserves with a
// block, nacks and acks; then connects in RESP3 and reads WQ.GET's map.
func TestRESPNode(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("examples/resp/node/node_modules/redis"); err != nil {
		if os.Getenv(EnvRequireClients) != "" {
			t.Fatalf("node-redis not installed (%s is set): run npm ci in server/examples/resp/node", EnvRequireClients)
		}
		t.Skip("node-redis not installed: npm ci in examples/resp/node")
	}
	p, addr := startRESP(t, "node")
	out := runExampleEnv(t, []string{"WHEELQ_RESP=" + addr}, p, "", "node", "examples/resp/node/worker.mjs")
	require.Contains(t, out, "ping PONG")
	require.Contains(t, out, "cancel job-2 1")
	require.Contains(t, out, "again job-1: DUPLICATE")
	require.Contains(t, out, "nacked job-1 attempt 1")
	require.Contains(t, out, "acked job-1 attempt 2 payload hello from node early=false")
	require.Contains(t, out, "resp3 state done attempts 2")
}
