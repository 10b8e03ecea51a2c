package resp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/config"
	"github.com/wheelq/wheelq/server/resp"
)

// TestRecur: WQ.RECUR declares a schedule (again: no change), WQ.RECURS
// lists it with its next slot, its slots' jobs are reserved with
// WQ.RESERVE, WQ.UNRECUR removes it; bad options are -ERR, an unknown
// name -NOTFOUND.
func TestRecur(t *testing.T) {
	t.Parallel()
	addr := start(t, nil, "beat")
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()

	args := []any{"WQ.RECUR", "beat-200", "beat", "EVERY", 200, "PAYLOAD", "tick", "MISSED", "skip", "HEADER", "k", "v"}
	require.NoError(t, rdb.Do(ctx, args...).Err())
	require.NoError(t, rdb.Do(ctx, args...).Err(), "the same again")
	list, err := rdb.Do(ctx, "WQ.RECURS").Slice()
	require.NoError(t, err)
	require.Len(t, list, 1)
	row := list[0].([]any)
	require.Equal(t, []any{"beat-200", "beat", "every 200ms"}, row[:3])
	next := row[3].(int64)
	require.Greater(t, next, time.Now().Add(-time.Second).UnixMilli())
	require.Zero(t, next%200, "slots are whole multiples of the interval")

	res, err := rdb.Do(ctx, "WQ.RESERVE", "COUNT", 10, "BLOCK", 5000, "TOPICS", "beat").Slice()
	require.NoError(t, err)
	job := res[0].([]any)
	require.True(t, strings.HasPrefix(job[1].(string), "beat-200@"), job[1])
	require.Equal(t, "tick", job[3])
	require.NoError(t, rdb.Do(ctx, "WQ.ACK", "beat", job[1], job[2]).Err())

	require.ErrorContains(t, rdb.Do(ctx, "WQ.RECUR", "bad", "beat", "CRON", "61 * * * *").Err(), "ERR ")
	require.ErrorContains(t, rdb.Do(ctx, "WQ.RECUR", "bad", "beat", "EVERY", 0).Err(), "ERR EVERY")
	require.ErrorContains(t, rdb.Do(ctx, "WQ.RECUR", "bad", "beat", "EVERY", 10, "MISSED", "never").Err(), "ERR MISSED")
	require.ErrorContains(t, rdb.Do(ctx, "WQ.RECUR", "bad", "beat", "EVERY").Err(), "ERR ")

	n, err := rdb.Do(ctx, "WQ.UNRECUR", "beat-200").Int()
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.ErrorContains(t, rdb.Do(ctx, "WQ.UNRECUR", "beat-200").Err(), "NOTFOUND ")
	list, err = rdb.Do(ctx, "WQ.RECURS").Slice()
	require.NoError(t, err)
	require.Empty(t, list)
}

// TestRecurOtherTenant: a token may not take another tenant's schedule
// over by declaring its name on a topic of its own, nor remove it: the
// right on the schedule's own topic is needed too. (Found over HTTP by a
// red team; the same check was missing here.)
func TestRecurOtherTenant(t *testing.T) {
	t.Parallel()
	shopTok, shopSum, err := auth.Generate("shop")
	require.NoError(t, err)
	mailTok, mailSum, err := auth.Generate("mail")
	require.NoError(t, err)
	addr := start(t, []config.Token{
		{ID: "shop", SHA256: shopSum, Produce: []string{"beat"}},
		{ID: "mail", SHA256: mailSum, Produce: []string{"mail"}},
	}, "beat", "mail")
	ctx := context.Background()
	shop := redis.NewClient(&redis.Options{Addr: addr, Password: shopTok, Protocol: 2})
	defer shop.Close()
	mail := redis.NewClient(&redis.Options{Addr: addr, Password: mailTok, Protocol: 2})
	defer mail.Close()

	require.NoError(t, shop.Do(ctx, "WQ.RECUR", "nightly", "beat", "EVERY", 60000).Err())
	require.ErrorContains(t, mail.Do(ctx, "WQ.RECUR", "nightly", "mail", "EVERY", 3600000).Err(), "FORBIDDEN ")
	require.ErrorContains(t, mail.Do(ctx, "WQ.UNRECUR", "nightly").Err(), "FORBIDDEN ")
	list, err := shop.Do(ctx, "WQ.RECURS").Slice()
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, []any{"nightly", "beat"}, list[0].([]any)[:2], "the schedule is the shop's still")
}

// TestOptionsOnce: an option given twice is a syntax error, as with
// Redis's own commands, not the last one silently winning (found by a red
// team: ID dup ID dup2 stored dup2); a HEADER may come again with another
// name.
func TestOptionsOnce(t *testing.T) {
	t.Parallel()
	args := func(s ...string) [][]byte {
		out := make([][]byte, len(s))
		for i, v := range s {
			out[i] = []byte(v)
		}
		return out
	}
	for _, bad := range [][]string{
		{"t", "p", "ID", "a", "ID", "b"},
		{"t", "p", "MAXATTEMPTS", "1", "maxattempts", "5"},
		{"t", "p", "REPLACE", "REPLACE"},
		{"t", "p", "HEADER", "k", "v", "HEADER", "k", "w"},
	} {
		_, err := resp.ParseSchedule(args(bad...))
		require.ErrorContains(t, err, "given twice", "%q", bad)
	}
	_, err := resp.ParseSchedule(args("t", "p", "HEADER", "k", "v", "HEADER", "l", "w"))
	require.NoError(t, err, "two headers")
	for _, bad := range [][]string{
		{"COUNT", "1", "COUNT", "2", "TOPICS", "t"},
		{"WITHMETA", "WITHMETA", "TOPICS", "t"},
	} {
		_, err := resp.ParseReserve(args(bad...), time.Minute)
		require.ErrorContains(t, err, "given twice", "%q", bad)
	}
	_, err = resp.ParseRecur(args("r", "t", "EVERY", "60000", "EVERY", "120000"))
	require.ErrorContains(t, err, "given twice")
}

// TestRecurOtherTenantTopicHidden: WQ.RECUR and WQ.UNRECUR of another
// tenant's schedule are -FORBIDDEN without naming that schedule's topic,
// on which the token has no permission (as over HTTP: found by a red
// team, the refusal named it).
func TestRecurOtherTenantTopicHidden(t *testing.T) {
	t.Parallel()
	billTok, billSum, err := auth.Generate("bill")
	require.NoError(t, err)
	mailTok, mailSum, err := auth.Generate("mail")
	require.NoError(t, err)
	addr := start(t, []config.Token{
		{ID: "bill", SHA256: billSum, Produce: []string{"billing.secret"}},
		{ID: "mail", SHA256: mailSum, Produce: []string{"mail"}},
	}, "billing.secret", "mail")
	ctx := context.Background()
	bill := redis.NewClient(&redis.Options{Addr: addr, Password: billTok, Protocol: 2})
	defer bill.Close()
	mail := redis.NewClient(&redis.Options{Addr: addr, Password: mailTok, Protocol: 2})
	defer mail.Close()

	require.NoError(t, bill.Do(ctx, "WQ.RECUR", "nightly", "billing.secret", "EVERY", 3600000).Err())
	for _, err := range []error{
		mail.Do(ctx, "WQ.RECUR", "nightly", "mail", "EVERY", 3600000).Err(),
		mail.Do(ctx, "WQ.UNRECUR", "nightly").Err(),
	} {
		require.ErrorContains(t, err, "FORBIDDEN ")
		require.NotContains(t, err.Error(), "billing", "the refusal names the other tenant's topic")
	}
}
