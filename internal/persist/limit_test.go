package persist

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAdmit: a cap's permits run out and come back at their expiry (by
// Redis's clock, whatever the callers') or release; a rate spaces the
// starts it gives, across calls; a renewal never brings a permit's expiry
// forward (a permit for a later start keeps it past that start).
func TestAdmit(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	b.srv.RequireReal(t)
	const now, lease = int64(1_000_000_000), int64(200_000) // a caller's clock far from Redis's
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
	got, err = b.store.Admit(b.ctx, now+100*lease, lease, []LimitRequest{req("d", now)})
	require.NoError(t, err)
	require.Equal(t, []int64{Denied}, got, "a caller's clock stepped far ahead does not lapse permits")
	time.Sleep(time.Duration(2*lease) * time.Microsecond) // their lease, by Redis's clock
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
	redisNow := func() float64 {
		tm, err := b.rdb.Time(b.ctx).Result()
		require.NoError(t, err)
		return float64(tm.UnixMicro())
	}
	first, err := b.rdb.ZScore(b.ctx, held, "y").Result()
	require.NoError(t, err)
	require.InDelta(t, redisNow()+11*float64(lease), first, float64(lease), "its start's wait and a lease, on Redis's clock")
	require.NoError(t, b.store.RenewPermits(b.ctx, lease, []PermitRef{{"both", "y"}}))
	score, err := b.rdb.ZScore(b.ctx, held, "y").Result()
	require.NoError(t, err)
	require.Equal(t, first, score, "a renewal brought the expiry before the start")
	before := redisNow()
	require.NoError(t, b.store.RenewPermits(b.ctx, 20*lease, []PermitRef{{"both", "y"}, {"both", "gone"}}))
	score, err = b.rdb.ZScore(b.ctx, held, "y").Result()
	require.NoError(t, err)
	require.GreaterOrEqual(t, score, before+20*float64(lease))
	require.LessOrEqual(t, score, redisNow()+20*float64(lease))
	n, err := b.rdb.ZCard(b.ctx, held).Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "a renewal does not add a released permit")
}
