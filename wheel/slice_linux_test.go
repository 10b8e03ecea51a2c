//go:build linux

package wheel

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/sched"
)

// TestSetSchedSlice runs in a child process of its own (the slice is the
// process's): every thread there, those running before the call and
// those started after it, runs with the slice asked for.
func TestSetSchedSlice(t *testing.T) {
	const d = 250 * time.Microsecond
	if os.Getenv("WHEEL_SLICE_CHILD") == "1" {
		err := SetSchedSlice(d)
		if errors.Is(err, ErrNoSchedSlice) {
			t.Skip(err)
		}
		require.NoError(t, err)
		// Threads started after the call: goroutines locked to threads
		// of their own, all alive at once.
		var wg sync.WaitGroup
		hold := make(chan struct{})
		for range 6 {
			wg.Go(func() {
				runtime.LockOSThread()
				<-hold
			})
		}
		time.Sleep(50 * time.Millisecond)
		tids, err := sched.Threads(0)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(tids), 7)
		for _, tid := range tids {
			a, err := sched.Get(tid)
			require.NoError(t, err)
			require.Equal(t, uint64(d), a.Runtime, "thread %d", tid)
		}
		close(hold)
		wg.Wait()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSetSchedSlice$", "-test.v")
	cmd.Env = append(os.Environ(), "WHEEL_SLICE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), "--- SKIP") {
		t.Skipf("the kernel cannot be asked: %s", out)
	}
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestSetSchedSlice")
	// This process's own threads are as they were.
	tids, err := sched.Threads(0)
	require.NoError(t, err)
	a, err := sched.Get(tids[0])
	require.NoError(t, err)
	require.NotEqual(t, uint64(d), a.Runtime)
}

func TestSetSchedSliceBounds(t *testing.T) {
	for _, d := range []time.Duration{0, MinSchedSlice - 1, MaxSchedSlice + 1, -time.Millisecond} {
		require.ErrorIs(t, SetSchedSlice(d), ErrBadSchedSlice, "%v", d)
	}
}
