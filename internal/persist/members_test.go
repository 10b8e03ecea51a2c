package persist

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// checkRoster runs the roster's protocol on s: joins, a peek, an expiry
// and a leave each move the version as documented, and a watcher is told
// of every change.
func checkRoster(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	changes := make(chan struct{}, 16)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.WatchRoster(wctx, func() { changes <- struct{}{} }) }()
	t.Cleanup(func() { cancel(); <-done })

	// The subscription may not be in place yet: beat until it tells.
	var ro Roster
	var err error
	require.Eventually(t, func() bool {
		ro, err = s.Members(ctx, MemberBeat, "b", time.Minute)
		require.NoError(t, err)
		_, _ = s.Members(ctx, MemberLeave, "b", 0)
		select {
		case <-changes:
			return true
		default:
			return false
		}
	}, 10*time.Second, 10*time.Millisecond, "a roster change reaches the watcher")

	a, err := s.Members(ctx, MemberBeat, "a", time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, a.Members)
	ab, err := s.Members(ctx, MemberBeat, "b", time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, ab.Members)
	require.Greater(t, ab.Version, a.Version, "a join changes the version")
	again, err := s.Members(ctx, MemberBeat, "a", time.Minute)
	require.NoError(t, err)
	require.Equal(t, ab.Version, again.Version, "a renewal does not")
	peek, err := s.Members(ctx, MemberPeek, "", 0)
	require.NoError(t, err)
	require.Equal(t, ab.Version, peek.Version)
	require.Empty(t, peek.Members, "a peek lists no one")

	left, err := s.Members(ctx, MemberLeave, "b", 0)
	require.NoError(t, err)
	require.Greater(t, left.Version, ab.Version, "a leave changes the version")
	require.True(t, left.Left, "b was there")
	again, err2 := s.Members(ctx, MemberLeave, "b", 0)
	require.NoError(t, err2)
	require.False(t, again.Left, "b is gone already: nothing to tell of")
	short, err := s.Members(ctx, MemberBeat, "c", time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "c"}, short.Members)
	require.Eventually(t, func() bool {
		ro, err = s.Members(ctx, MemberBeat, "a", time.Minute)
		require.NoError(t, err)
		return len(ro.Members) == 1
	}, 10*time.Second, 5*time.Millisecond, "an entry not renewed expires")
	require.Equal(t, []string{"a"}, ro.Members)
	require.Greater(t, ro.Version, short.Version, "an expiry changes the version")
	require.Eventually(t, func() bool { return len(changes) > 0 }, 10*time.Second, 5*time.Millisecond, "the watcher is told")
}

func TestRoster(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	checkRoster(t, b.store)
}

// TestRosterOnMiniredis: the embedded Redis of the quickstart runs the
// roster script too (TIME and PUBLISH in Lua).
func TestRosterOnMiniredis(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := New(rdb, Options{Namespace: "mini"})
	require.NoError(t, err)
	checkRoster(t, s)
}
