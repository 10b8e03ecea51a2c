package persist

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClaimOfPausedTopic: a job of a paused topic is answered Paused with
// its score, not marked running and not returned; jobs of other topics in
// the same call are claimed as usual; once resumed, the job is claimed.
func TestClaimOfPausedTopic(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	var ws []Write
	for _, k := range []string{JobKey("p", "1"), JobKey("o", "1")} {
		ws = append(ws, Write{Key: k, Due: 1000, Record: rec("x"), Replace: true})
	}
	_, err := b.store.Write(b.ctx, nil, ws)
	require.NoError(t, err)
	require.NoError(t, b.store.SetPaused(b.ctx, "p", true))
	paused, err := b.store.PausedTopics(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"p"}, paused)
	reqs := []ClaimRequest{{Key: JobKey("p", "1")}, {Key: JobKey("o", "1")}}
	res, err := b.store.Claim(b.ctx, nil, reqs, nil)
	require.NoError(t, err)
	require.True(t, res[0].Paused)
	require.Equal(t, int64(1000), res[0].Due)
	require.Nil(t, res[0].Record)
	require.False(t, res[1].Paused)
	require.NotNil(t, res[1].Record)
	running, err := b.store.Running(b.ctx, b.store.PartitionOf(JobKey("p", "1")))
	require.NoError(t, err)
	require.NotContains(t, running, Entry{Key: JobKey("p", "1"), Due: 1000}, "not marked")
	running, err = b.store.Running(b.ctx, b.store.PartitionOf(JobKey("o", "1")))
	require.NoError(t, err)
	require.Contains(t, running, Entry{Key: JobKey("o", "1"), Due: 1000}, "marked")

	require.NoError(t, b.store.SetPaused(b.ctx, "p", false))
	res, err = b.store.Claim(b.ctx, nil, reqs[:1], nil)
	require.NoError(t, err)
	require.False(t, res[0].Paused)
	require.NotNil(t, res[0].Record)
	paused, err = b.store.PausedTopics(b.ctx)
	require.NoError(t, err)
	require.Empty(t, paused)
}

// TestTallyTopicsPages: a walk of a set in pages counts every member once
// by topic, and those scored below the given score apart.
func TestTallyTopicsPages(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	var ws []Write
	for i := range 7 {
		topic := []string{"a", "b"}[i%2]
		ws = append(ws, Write{Key: JobKey(topic, fmt.Sprint(i)), Due: int64(100 * i), Record: rec(""), Replace: true})
	}
	_, err := b.store.Write(b.ctx, nil, ws)
	require.NoError(t, err)
	got := map[string]Tally{}
	calls := 0
	for start := int64(0); start >= 0; calls++ {
		ts, next, err := b.store.TallyTopics(b.ctx, 0, false, start, 3, 350)
		require.NoError(t, err)
		for _, tl := range ts {
			g := got[tl.Topic]
			g.Topic, g.N, g.Below = tl.Topic, g.N+tl.N, g.Below+tl.Below
			got[tl.Topic] = g
		}
		start = next
	}
	require.Equal(t, 3, calls, "pages of 3 of 7 members")
	require.Equal(t, map[string]Tally{"a": {"a", 4, 2}, "b": {"b", 3, 2}}, got) // below 350: a/0, a/2; b/1, b/3
	_, _, err = b.store.TallyTopics(b.ctx, 0, false, 0, 0, 0)
	require.Error(t, err)
}

// TestWatchPaused: a pause and a resume are told to a watcher.
func TestWatchPaused(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	ctx, cancel := context.WithCancel(b.ctx)
	type change struct {
		topic  string
		paused bool
	}
	got := make(chan change, 4)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		_ = b.store.WatchPaused(ctx, func(topic string, paused bool) { got <- change{topic, paused} })
	})
	// The subscription is made asynchronously: publish until it is seen.
	require.Eventually(t, func() bool {
		if b.store.SetPaused(b.ctx, "mail", true) != nil {
			return false
		}
		select {
		case c := <-got:
			return c == change{"mail", true}
		case <-time.After(20 * time.Millisecond):
			return false
		}
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, b.store.SetPaused(b.ctx, "mail", false))
	for {
		select {
		case c := <-got:
			if c == (change{"mail", true}) {
				continue // a pause published twice above, seen late
			}
			require.Equal(t, change{"mail", false}, c)
			return
		case <-time.After(10 * time.Second):
			t.Fatal("resume not told")
		}
	}
}
