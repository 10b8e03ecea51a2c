package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// envAsMain makes the test binary run main() with the arguments after
// "--": the command as a user runs it, process-wide settings included.
const envAsMain = "WHEELQ_CLI_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envAsMain) != "" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"wheelq"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		return
	}
	os.Exit(m.Run())
}

// TestNoClientLogLines: with Redis unreachable the
// command printed go-redis's own log lines (pool.go, "failed to dial")
// beside its message. The command owns its output: one message of its
// own, no client library lines.
func TestNoClientLogLines(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "--", "-url", nowhere, "-timeout", "2s", "stats")
	cmd.Env = append(os.Environ(), envAsMain+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	require.Equal(t, 1, exit.ExitCode(), "%s", out)
	require.Contains(t, string(out), "cannot reach Redis")
	require.NotContains(t, string(out), "pool.go")
	require.NotContains(t, string(out), "redis: ")
	require.Equal(t, 2, strings.Count(strings.TrimSpace(string(out)), "\n")+1, "the message and its hint only:\n%s", out)
}
