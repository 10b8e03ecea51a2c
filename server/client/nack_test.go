package client_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/client"
)

// A long cause, even one of characters JSON escapes, is cut to
// client.MaxCause bytes at a UTF-8 boundary, so the nack fits the
// server's limit on its body and the job is retried at once.
func TestNackLongCause(t *testing.T) {
	base := startServer(t, "work")
	c := client.New(base, "")
	ctx := context.Background()
	for i, cause := range []string{strings.Repeat("<&>", 3000), strings.Repeat("é", 3000) + "x", strings.Repeat("a", 100000), strings.Repeat("\x01", 3000)} {
		id := string(rune('a' + i))
		_, err := c.Schedule(ctx, "work", nil, client.Schedule{ID: id})
		require.NoError(t, err)
		rs, err := c.Reserve(ctx, client.Reserve{Topics: []string{"work"}, Wait: 5 * time.Second})
		require.NoError(t, err)
		require.Len(t, rs, 1)
		require.NoError(t, c.Nack(ctx, &rs[0], cause, time.Millisecond, false))
		rs, err = c.Reserve(ctx, client.Reserve{Topics: []string{"work"}, Wait: 5 * time.Second})
		require.NoError(t, err)
		require.Len(t, rs, 1)
		last := rs[0].LastError
		require.True(t, utf8.ValidString(last))
		require.LessOrEqual(t, len(last), client.MaxCause)
		require.True(t, strings.HasSuffix(last, "… (truncated)"), "%q", last[len(last)-20:])
		require.True(t, strings.HasPrefix(cause, strings.TrimSuffix(last, "… (truncated)")))
		require.NoError(t, c.Ack(ctx, &rs[0]))
	}
	// A short cause is sent as it is.
	_, err := c.Schedule(ctx, "work", nil, client.Schedule{ID: "short"})
	require.NoError(t, err)
	rs, err := c.Reserve(ctx, client.Reserve{Topics: []string{"work"}, Wait: 5 * time.Second})
	require.NoError(t, err)
	require.NoError(t, c.Nack(ctx, &rs[0], "<b>&", time.Millisecond, false))
	rs, err = c.Reserve(ctx, client.Reserve{Topics: []string{"work"}, Wait: 5 * time.Second})
	require.NoError(t, err)
	require.Equal(t, "<b>&", rs[0].LastError)
}
