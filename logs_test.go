package wheelq

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestFailuresAreLogged: a handler that fails four times logged
// nothing at Info. Every failure that will be retried, and every
// dead-lettering, is a Warn line with the topic, the id and the attempt.
func TestFailuresAreLogged(t *testing.T) {
	t.Parallel()
	var out lockedBuffer
	b := setup(t, Config{Logger: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	r := newRuns()
	require.NoError(t, b.q.Handle("hook", HandlerFunc(func(_ context.Context, j *Job) error {
		r.add(j)
		return errors.New("upstream said 503")
	})))
	_, err := b.q.Schedule(b.ctx, "hook", nil, ID("order-7"), MaxAttempts(3))
	require.NoError(t, err)
	for range 3 {
		r.next(t)
	}
	eventually(t, func() bool { return strings.Contains(out.String(), "job dead-lettered") }, "the dead-lettering is logged")
	lines := strings.Split(out.String(), "\n")
	var retries []string
	for _, l := range lines {
		if strings.Contains(l, "job failed; retrying") {
			retries = append(retries, l)
		}
	}
	require.Len(t, retries, 2, "attempts 1 and 2 are retried: %s", out.String())
	for i, l := range retries {
		require.Contains(t, l, "level=WARN")
		require.Contains(t, l, "topic=hook")
		require.Contains(t, l, "id=order-7")
		require.Contains(t, l, "attempt="+string(rune('1'+i)))
		require.Contains(t, l, "max_attempts=3")
		require.Contains(t, l, `err="upstream said 503"`)
	}
	require.Regexp(t, `level=WARN msg="wheelq: job dead-lettered" topic=hook id=order-7 attempt=3 max_attempts=3`, out.String())
}
