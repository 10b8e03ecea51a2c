package wheelq

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/leakcheck"
	"github.com/wheelq/wheelq/internal/redistest"
)

const envLifecycleChild = "WHEELQ_TEST_LIFECYCLE_CHILD"

// TestNewStartsNoGoroutine: New starts nothing, so a queue made and never
// used needs no Shutdown; Shutdown of it is safe, and so is a second one.
// It runs in a child process of its own, where no other test's goroutines
// are counted.
func TestNewStartsNoGoroutine(t *testing.T) {
	t.Parallel()
	if os.Getenv(envLifecycleChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNewStartsNoGoroutine$", "-test.count=1")
		cmd.Env = append(os.Environ(), envLifecycleChild+"=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "PASS")
		return
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // New does no I/O
	defer rdb.Close()
	before := leakcheck.Running("github.com/wheelq/wheelq")
	q, err := New(rdb, Config{})
	require.NoError(t, err)
	require.Equal(t, before, leakcheck.Running("github.com/wheelq/wheelq"), "New started a goroutine")
	require.NoError(t, q.Shutdown(context.Background()))
	require.NoError(t, q.Shutdown(context.Background()), "twice")
	require.Equal(t, before, leakcheck.Running("github.com/wheelq/wheelq"))
}

// TestConcurrentStartAndShutdown: Start and Shutdown called at once from
// several goroutines (as a signal handler may race a slow start) neither
// race nor hang, and leave nothing running (TestMain's leak check).
func TestConcurrentStartAndShutdown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	for range 5 {
		q, err := New(srv.Client(t), Config{})
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				err := q.Start(context.Background())
				if err != nil {
					require.ErrorIs(t, err, ErrClosed)
				}
			})
			wg.Go(func() { _ = q.Shutdown(context.Background()) })
		}
		wg.Wait()
		require.NoError(t, q.Shutdown(context.Background()))
		require.ErrorIs(t, q.Start(context.Background()), ErrClosed)
	}
}
