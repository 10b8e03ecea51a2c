package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/client"
	"github.com/wheelq/wheelq/server/config"
	"github.com/wheelq/wheelq/server/internal/servertest"
)

// startServer runs a wheelq server in this process on a real
// redis-server, pulling topics, and returns its base URL.
func startServer(t *testing.T, pull ...string) string {
	t.Helper()
	return servertest.Start(t, func(c *config.Config) { c.Queue.Pull = pull }).HTTP
}

func TestClient(t *testing.T) {
	base := startServer(t, "work")
	c := client.New(base, "")
	ctx := context.Background()
	payload := []byte{0, 0xff, 'a'}
	s, err := c.Schedule(ctx, "work", payload, client.Schedule{ID: "j1", Delay: 100 * time.Millisecond, Headers: map[string]string{"k": "v"}})
	require.NoError(t, err)
	require.Equal(t, "j1", s.ID)
	_, err = c.Schedule(ctx, "work", nil, client.Schedule{ID: "j1"})
	require.True(t, errors.Is(err, client.ErrDuplicate), "%v", err)
	require.False(t, errors.Is(err, client.ErrNotFound))

	rs, err := c.Reserve(ctx, client.Reserve{Topics: []string{"work"}, Wait: 10 * time.Second, TTR: time.Minute})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	r := &rs[0]
	require.False(t, time.Now().Before(s.Due))
	require.Equal(t, payload, r.Bytes())
	require.Equal(t, "v", r.Headers["k"])
	dl, err := c.Touch(ctx, r, 2*time.Minute)
	require.NoError(t, err)
	require.True(t, dl.After(time.Now().Add(time.Minute)))
	require.NoError(t, c.Nack(ctx, r, "later", 10*time.Millisecond, false))
	require.ErrorIs(t, c.Ack(ctx, r), client.ErrReservationLost)

	rs, err = c.Reserve(ctx, client.Reserve{Topics: []string{"work"}, Wait: 10 * time.Second})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, 2, rs[0].Attempt)
	errs, err := c.AckAll(ctx, []client.Reservation{rs[0], {Topic: "work", ID: "j1", Token: "0123456789abc"}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], client.ErrReservationLost)
	j, err := c.Get(ctx, "work", "j1")
	require.NoError(t, err)
	require.Equal(t, "done", j.State)

	_, err = c.Schedule(ctx, "work", nil, client.Schedule{ID: "later", At: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.NoError(t, c.Reschedule(ctx, "work", "later", time.Now().Add(2*time.Hour)))
	require.NoError(t, c.Cancel(ctx, "work", "later"))
	_, err = c.Get(ctx, "work", "nope")
	require.ErrorIs(t, err, client.ErrNotFound)
	_, err = c.Reserve(ctx, client.Reserve{Topics: []string{"other"}})
	require.ErrorIs(t, err, client.ErrTopicMode)
}
