package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/server/auth"
)

// EnvRequireClients, set (as CI sets it), makes a missing interpreter a
// failure, not a skip.
const EnvRequireClients = "WHEELQ_REQUIRE_CLIENTS"

// startWithToken starts a server on a real redis-server that needs a
// token, and returns it with one that may do everything.
func startWithToken(t *testing.T, pull string) (*proc, string) {
	t.Helper()
	rs := redistest.Start(t, redistest.Options{})
	tok, sum, err := auth.Generate("examples")
	require.NoError(t, err)
	cfg := filepath.Join(t.TempDir(), "wheelq-server.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(`
[[token]]
id = "examples"
sha256 = "`+sum+`"
admin = ["*"]
`), 0o600))
	p := startServer(t, nil, "-config", cfg, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-pull", pull)
	return p, tok
}

// runExample runs an example with its real interpreter against p.
func runExample(t *testing.T, p *proc, tok string, interp string, args ...string) string {
	t.Helper()
	return runExampleEnv(t, nil, p, tok, interp, args...)
}

// runExampleEnv is runExample with more environment variables.
func runExampleEnv(t *testing.T, env []string, p *proc, tok string, interp string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath(interp); err != nil {
		if os.Getenv(EnvRequireClients) != "" {
			t.Fatalf("%s not installed (%s is set): %v", interp, EnvRequireClients, err)
		}
		t.Skipf("%s not installed", interp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, interp, args...)
	cmd.Env = append(append(os.Environ(), "WHEELQ_URL="+p.URL, "WHEELQ_TOKEN="+tok), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %v:\n%s", interp, args, out)
	t.Logf("%s:\n%s", interp, out)
	return string(out)
}

// TestExamplePHPOrders: from PHP, two orders get expiry jobs, the paid
// one's is cancelled; only the unpaid one expires, and it ends done.
func TestExamplePHPOrders(t *testing.T) {
	t.Parallel()
	p, tok := startWithToken(t, "orders.expire")
	out := runExample(t, p, tok, "php", "examples/php-orders/orders.php")
	require.Contains(t, out, "again 1001: duplicate")
	require.Contains(t, out, "paid 1002: expiry cancelled")
	require.Contains(t, out, "expired 1001 (attempt 1)")
	require.NotContains(t, out, "expired 1002")
	require.Contains(t, out, "1001 is done")
}

// TestExamplePythonReminders: from Python's standard library, reminders
// booked in one batch, one moved, one cancelled; each remaining one sent
// once, none early.
func TestExamplePythonReminders(t *testing.T) {
	t.Parallel()
	p, tok := startWithToken(t, "reminders")
	// Debian's interpreter: the one python3-* packages are for.
	out := runExample(t, p, tok, "/usr/bin/python3", "examples/python-reminders/reminders.py")
	require.Contains(t, out, "booked ['appt-ana', 'appt-bo', 'appt-cy'] failed 0")
	require.Contains(t, out, "appt-zed: not_found")
	require.Equal(t, 1, strings.Count(out, "sent appt-ana to ana via north"))
	require.Equal(t, 1, strings.Count(out, "sent appt-bo to bo via north"))
	require.NotContains(t, out, "appt-cy to")
	require.NotContains(t, out, "EARLY")
	require.Contains(t, out, "sent ['ana', 'bo']")
	require.Regexp(t, `digest next \d{4}-\d\d-\d\dT0[56]:00:00Z same again: True`, out, "07:00 in Berlin, in UTC")
	require.Contains(t, out, "schedules ['clinic-digest']")
	require.Contains(t, out, "schedules left 0")
}

// TestExampleNodeWorker: from Node's fetch, a worker reserves, acks,
// nacks a failure (it comes back as attempt 2) and touches a long job.
func TestExampleNodeWorker(t *testing.T) {
	t.Parallel()
	p, tok := startWithToken(t, "work")
	out := runExample(t, p, tok, "node", "examples/node-worker/worker.mjs")
	require.Contains(t, out, "scheduled 4")
	require.Contains(t, out, "failed flaky attempt 1: retry in 200 ms")
	require.Contains(t, out, "done flaky attempt 2 (after: upstream timeout)")
	require.Contains(t, out, "done long attempt 1")
	require.Contains(t, out, "done resize-1 attempt 1")
	require.Contains(t, out, "flaky: done after 2 attempts")
}
