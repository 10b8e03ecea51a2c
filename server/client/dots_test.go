package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/client"
)

// Jobs whose id (or topic) is "." or ".." are reached: the client escapes
// such a segment, which the server would otherwise refuse (no_route).
func TestDotSegments(t *testing.T) {
	base := startServer(t, "work", "..")
	c := client.New(base, "")
	ctx := context.Background()
	for _, topic := range []string{"work", ".."} {
		for _, id := range []string{".", ".."} {
			_, err := c.Schedule(ctx, topic, []byte("p"), client.Schedule{ID: id, At: time.Now().Add(time.Hour)})
			require.NoError(t, err, "%s/%s", topic, id)
			j, err := c.Get(ctx, topic, id)
			require.NoError(t, err, "%s/%s", topic, id)
			require.Equal(t, id, j.ID)
			require.NoError(t, c.Reschedule(ctx, topic, id, time.Now().Add(-time.Second)), "%s/%s", topic, id)
			rs, err := c.Reserve(ctx, client.Reserve{Topics: []string{topic}, Wait: 5 * time.Second})
			require.NoError(t, err)
			require.Len(t, rs, 1)
			r := &rs[0]
			_, err = c.Touch(ctx, r, time.Minute)
			require.NoError(t, err, "%s/%s", topic, id)
			require.NoError(t, c.Nack(ctx, r, "again", time.Millisecond, false), "%s/%s", topic, id)
			rs, err = c.Reserve(ctx, client.Reserve{Topics: []string{topic}, Wait: 5 * time.Second})
			require.NoError(t, err)
			require.Len(t, rs, 1)
			require.NoError(t, c.Ack(ctx, &rs[0]), "%s/%s", topic, id)
			_, err = c.Schedule(ctx, topic, nil, client.Schedule{ID: id, Replace: true, At: time.Now().Add(time.Hour)})
			require.NoError(t, err)
			require.NoError(t, c.Cancel(ctx, topic, id), "%s/%s", topic, id)
		}
	}
}
