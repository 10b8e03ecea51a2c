package persist

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAdmit: a cap's permits run out and come back at their expiry or
// release; a rate spaces the starts it gives, across calls; a renewal
// never brings a permit's expiry forward (a permit for a later start
// keeps it past that start).
func TestAdmit(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	b.srv.RequireReal(t)
	const now, lease = int64(1_000_000_000), int64(1_000_000)
	req := func(id string, due int64) LimitRequest {
		return LimitRequest{Topic: "c", Cap: 2, ID: id, Due: due}
	}
	got, err := b.store.Admit(b.ctx, now, lease, []LimitRequest{req("a", now), req("b", now), req("c", now)})
	require.NoError(t, err)
	require.Equal(t, []int64{now, now, Denied}, got)
	require.NoError(t, b.store.ReleasePermits(b.ctx, []PermitRef{{"c", "a"}}))
	got, err = b.store.Admit(b.ctx, now, lease, []LimitRequest{req("c", now)})
	require.NoError(t, err)
	require.Equal(t, []int64{now}, got, "a released permit is free")
	got, err = b.store.Admit(b.ctx, now+lease+1, lease, []LimitRequest{req("d", now), req("e", now), req("f", now)})
	require.NoError(t, err)
	require.Equal(t, []int64{now + lease + 1, now + lease + 1, Denied}, got, "lapsed permits are free; the due time is past: now")

	rate := func(id string) LimitRequest { return LimitRequest{Topic: "r", Interval: 5000, ID: id, Due: now} }
	got, err = b.store.Admit(b.ctx, now, lease, []LimitRequest{rate("1"), rate("2")})
	require.NoError(t, err)
	require.Equal(t, []int64{now, now + 5000}, got)
	got, err = b.store.Admit(b.ctx, now, lease, []LimitRequest{rate("3")})
	require.NoError(t, err)
	require.Equal(t, []int64{now + 10000}, got, "the rate holds across calls")

	both := LimitRequest{Topic: "both", Cap: 5, Interval: 10 * lease, ID: "x", Due: now}
	got, err = b.store.Admit(b.ctx, now, lease, []LimitRequest{both, {Topic: "both", Cap: 5, Interval: 10 * lease, ID: "y", Due: now}})
	require.NoError(t, err)
	require.Equal(t, now+10*lease, got[1])
	held, _ := b.store.limitKeys("both")
	require.NoError(t, b.store.RenewPermits(b.ctx, now+lease, []PermitRef{{"both", "y"}}))
	score, err := b.rdb.ZScore(b.ctx, held, "y").Result()
	require.NoError(t, err)
	require.Equal(t, float64(now+11*lease), score, "a renewal brought the expiry before the start")
	require.NoError(t, b.store.RenewPermits(b.ctx, now+20*lease, []PermitRef{{"both", "y"}, {"both", "gone"}}))
	score, err = b.rdb.ZScore(b.ctx, held, "y").Result()
	require.NoError(t, err)
	require.Equal(t, float64(now+20*lease), score)
	n, err := b.rdb.ZCard(b.ctx, held).Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "a renewal does not add a released permit")
}
