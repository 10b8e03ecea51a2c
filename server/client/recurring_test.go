package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/client"
	"github.com/wheelq/wheelq/server/config"
	"github.com/wheelq/wheelq/server/httpapi"
	"github.com/wheelq/wheelq/server/internal/servertest"
)

// names lists the names of schedules.
func names(list []client.RecurringInfo) []string {
	out := []string{}
	for _, ri := range list {
		out = append(out, ri.Name)
	}
	return out
}

// Recurring schedules through a real server: declared (again: the same),
// replaced, listed with their next slots and the job of the latest slot
// whose time came, removed (again: not found).
func TestRecurring(t *testing.T) {
	base := startServer(t, "work")
	c := client.New(base, "")
	ctx := context.Background()

	list, err := c.Recurrings(ctx)
	require.NoError(t, err)
	require.NotNil(t, list)
	require.Empty(t, list)

	r := client.Recurring{Name: "beat", Topic: "work", Every: time.Hour, Payload: []byte{0, 0xff, 'a'},
		Headers: map[string]string{"k": "v"}, MaxAttempts: 3, Missed: "skip"}
	ri, err := c.DeclareRecurring(ctx, r)
	require.NoError(t, err)
	require.Equal(t, "beat", ri.Name)
	require.Equal(t, "work", ri.Topic)
	require.Equal(t, time.Hour, ri.Every)
	require.Equal(t, r.Payload, ri.Payload)
	require.Equal(t, r.Headers, ri.Headers)
	require.Equal(t, 3, ri.MaxAttempts)
	require.Equal(t, "skip", ri.Missed)
	require.Len(t, ri.Next, 3)
	require.True(t, ri.Next[0].After(time.Now().Add(-time.Second)))
	require.Equal(t, time.Hour, ri.Next[1].Sub(ri.Next[0]))
	again, err := c.DeclareRecurring(ctx, r)
	require.NoError(t, err)
	require.Equal(t, ri.Next, again.Next)

	// Replaced: a cron in a time zone, bounded, without payload.
	start := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	end := start.Add(48 * time.Hour)
	ri, err = c.DeclareRecurring(ctx, client.Recurring{Name: "beat", Topic: "work", Cron: "0 9 * * *", TimeZone: "Europe/Paris",
		Start: start, End: end})
	require.NoError(t, err)
	require.Equal(t, "0 9 * * *", ri.Cron)
	require.Zero(t, ri.Every)
	require.Equal(t, "Europe/Paris", ri.TimeZone)
	require.Nil(t, ri.Payload)
	require.Equal(t, "latest", ri.Missed)
	require.True(t, start.Equal(ri.Start), "%v %v", start, ri.Start)
	require.True(t, end.Equal(ri.End))
	require.NotEmpty(t, ri.Next)
	require.LessOrEqual(t, len(ri.Next), 2) // two 09:00s in 48 h
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	for _, n := range ri.Next {
		require.Equal(t, 9, n.In(paris).Hour())
	}

	// A fast one: the job of its latest slot whose time came is listed.
	_, err = c.DeclareRecurring(ctx, client.Recurring{Name: "fast", Topic: "work", Every: 100 * time.Millisecond, Payload: []byte("tick")})
	require.NoError(t, err)
	var fast client.RecurringInfo
	require.Eventually(t, func() bool {
		list, err := c.Recurrings(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"beat", "fast"}, names(list))
		fast = list[1]
		return fast.Last != nil && !fast.Stored.IsZero()
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, "work", fast.Last.Topic)
	require.NotEmpty(t, fast.Last.ID)
	require.NotEmpty(t, fast.Last.State)
	require.Equal(t, []byte("tick"), fast.Payload)
	require.Equal(t, 100*time.Millisecond, fast.Every)

	require.NoError(t, c.RemoveRecurring(ctx, "fast"))
	require.ErrorIs(t, c.RemoveRecurring(ctx, "fast"), client.ErrNotFound)
	require.NoError(t, c.RemoveRecurring(ctx, "beat"))
	list, err = c.Recurrings(ctx)
	require.NoError(t, err)
	require.Empty(t, list)
}

// Names that are not plain path segments ("." and "..", a slash, a
// space, a '%') reach their schedule.
func TestRecurringNames(t *testing.T) {
	base := startServer(t, "work")
	c := client.New(base, "")
	ctx := context.Background()
	all := []string{".", "..", "a/b", "a b", "100%", "é?#"}
	for _, name := range all {
		ri, err := c.DeclareRecurring(ctx, client.Recurring{Name: name, Topic: "work", Every: time.Hour})
		require.NoError(t, err, "%q", name)
		require.Equal(t, name, ri.Name)
	}
	list, err := c.Recurrings(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, all, names(list))
	for _, name := range all {
		require.NoError(t, c.RemoveRecurring(ctx, name), "%q", name)
		require.ErrorIs(t, c.RemoveRecurring(ctx, name), client.ErrNotFound, "%q", name)
	}
}

// Bad declarations are ErrInvalid (those the client can tell without a
// request are not sent); a topic the server does not pull is
// ErrTopicMode. Nothing is stored.
func TestRecurringInvalid(t *testing.T) {
	base := startServer(t, "work")
	c := client.New(base, "")
	ctx := context.Background()
	long := strings.Repeat("n", 201)
	for what, r := range map[string]client.Recurring{
		"no cron nor every":     {Name: "x", Topic: "work"},
		"cron and every":        {Name: "x", Topic: "work", Cron: "* * * * *", Every: time.Minute},
		"bad cron":              {Name: "x", Topic: "work", Cron: "every tuesday"},
		"every under 10ms":      {Name: "x", Topic: "work", Every: 5 * time.Millisecond},
		"negative every":        {Name: "x", Topic: "work", Every: -time.Second},
		"every past 100 years":  {Name: "x", Topic: "work", Every: 101 * 365 * 24 * time.Hour},
		"every not whole ms":    {Name: "x", Topic: "work", Every: 1500 * time.Microsecond},
		"bad missed":            {Name: "x", Topic: "work", Every: time.Minute, Missed: "sometimes"},
		"bad time zone":         {Name: "x", Topic: "work", Cron: "* * * * *", TimeZone: "Mars/Olympus"},
		"empty name":            {Topic: "work", Every: time.Minute},
		"name past 200 bytes":   {Name: long, Topic: "work", Every: time.Minute},
		"control char in name":  {Name: "a\x01", Topic: "work", Every: time.Minute},
		"no topic":              {Name: "x", Every: time.Minute},
		"end before start":      {Name: "x", Topic: "work", Every: time.Minute, Start: time.Now().Add(time.Hour), End: time.Now()},
		"negative max attempts": {Name: "x", Topic: "work", Every: time.Minute, MaxAttempts: -1},
	} {
		_, err := c.DeclareRecurring(ctx, r)
		require.ErrorIs(t, err, client.ErrInvalid, "%s: %v", what, err)
	}
	_, err := c.DeclareRecurring(ctx, client.Recurring{Name: "x", Topic: "other", Every: time.Minute})
	require.ErrorIs(t, err, client.ErrTopicMode)
	require.ErrorIs(t, c.RemoveRecurring(ctx, ""), client.ErrInvalid)
	require.ErrorIs(t, c.RemoveRecurring(ctx, long), client.ErrInvalid)
	list, err := c.Recurrings(ctx)
	require.NoError(t, err)
	require.Empty(t, list)
}

// What the client refuses without a request is not sent.
func TestRecurringRefusedUnsent(t *testing.T) {
	var n atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) }))
	defer s.Close()
	c := client.New(s.URL, "")
	ctx := context.Background()
	for _, r := range []client.Recurring{{Topic: "t", Every: time.Minute}, {Name: "x", Topic: "t", Every: time.Millisecond + 1}} {
		_, err := c.DeclareRecurring(ctx, r)
		require.ErrorIs(t, err, client.ErrInvalid)
	}
	require.ErrorIs(t, c.RemoveRecurring(ctx, ""), client.ErrInvalid)
	require.Zero(t, n.Load())
}

// With tokens: a schedule is declared and removed with the produce right
// on its topic; a token without it (or one that would take over another
// topic's schedule by its name) is ErrForbidden, and does not see it
// listed; no token is ErrUnauthorized.
func TestRecurringRights(t *testing.T) {
	tokA, sumA, err := auth.Generate("a")
	require.NoError(t, err)
	tokB, sumB, err := auth.Generate("b")
	require.NoError(t, err)
	base := servertest.Start(t, func(c *config.Config) {
		c.Queue.Pull = []string{"work", "other"}
		c.Tokens = []config.Token{{ID: "a", SHA256: sumA, Produce: []string{"work"}}, {ID: "b", SHA256: sumB, Produce: []string{"other"}}}
	}).HTTP
	a, b, none := client.New(base, tokA), client.New(base, tokB), client.New(base, "")
	ctx := context.Background()
	_, err = a.DeclareRecurring(ctx, client.Recurring{Name: "beat", Topic: "work", Every: time.Hour})
	require.NoError(t, err)
	_, err = b.DeclareRecurring(ctx, client.Recurring{Name: "beat", Topic: "other", Every: time.Hour})
	require.ErrorIs(t, err, client.ErrForbidden, "b takes a's schedule over by its name")
	_, err = b.DeclareRecurring(ctx, client.Recurring{Name: "b1", Topic: "work", Every: time.Hour})
	require.ErrorIs(t, err, client.ErrForbidden)
	require.ErrorIs(t, b.RemoveRecurring(ctx, "beat"), client.ErrForbidden)
	list, err := b.Recurrings(ctx)
	require.NoError(t, err)
	require.Empty(t, list)
	list, err = a.Recurrings(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"beat"}, names(list))
	_, err = none.Recurrings(ctx)
	require.ErrorIs(t, err, client.ErrUnauthorized)
	_, err = none.DeclareRecurring(ctx, client.Recurring{Name: "beat", Topic: "work", Every: time.Hour})
	require.ErrorIs(t, err, client.ErrUnauthorized)
	require.ErrorIs(t, none.RemoveRecurring(ctx, "beat"), client.ErrUnauthorized)
	require.NoError(t, a.RemoveRecurring(ctx, "beat"))
}

// A declaration or removal that lost the race for the schedule at each of
// the server's tries is ErrContended, its message ending with the
// server's Retry-After. The reply is the server's own, written by its
// HTTP API (httpapi's WriteError of wheelq.ErrContended, as the library
// wraps it): a real race cannot be made to lose five times in a row from
// outside the server (the library's TestRecurringContended makes one with
// a store of its tests). So is the server's unavailable on the list.
func TestRecurringContended(t *testing.T) {
	az, err := auth.New(nil, true)
	require.NoError(t, err)
	api := httpapi.New(nil, az, httpapi.Options{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			api.WriteError(w, r, fmt.Errorf("wheelq: recurrings: %w", wheelq.ErrUnavailable))
			return
		}
		api.WriteError(w, r, fmt.Errorf("wheelq: declare recurring %q: %w", "beat", wheelq.ErrContended))
	}))
	defer s.Close()
	c := client.New(s.URL, "")
	ctx := context.Background()
	_, err = c.DeclareRecurring(ctx, client.Recurring{Name: "beat", Topic: "work", Every: time.Hour})
	require.ErrorIs(t, err, client.ErrContended)
	require.NotErrorIs(t, err, client.ErrUnavailable)
	require.True(t, strings.HasSuffix(err.Error(), "(Retry-After 1)"), "%v", err)
	err = c.RemoveRecurring(ctx, "beat")
	require.ErrorIs(t, err, client.ErrContended)
	require.True(t, strings.HasSuffix(err.Error(), "(Retry-After 1)"), "%v", err)
	_, err = c.Recurrings(ctx)
	require.ErrorIs(t, err, client.ErrUnavailable)
	require.True(t, strings.HasSuffix(err.Error(), "(Retry-After 1)"), "%v", err)
}

// A 2xx without the schedule expected is an error naming the route; a
// proxy's 503 is ErrUnavailable, its 504 ErrOutcomeUnknown for a PUT or
// DELETE and ErrUnavailable for the list.
func TestRecurringReplies(t *testing.T) {
	ctx := context.Background()
	r := client.Recurring{Name: "beat", Topic: "t", Every: time.Hour}
	for _, body := range []string{"", "{}", `{"name":"beat","topic":"t","missed":"latest"}`, "[]"} {
		c := stub(t, http.StatusOK, "application/json", body)
		_, err := c.DeclareRecurring(ctx, r)
		require.Error(t, err, "%q", body)
		require.Contains(t, err.Error(), "PUT /v1/recurring/beat", "%q", body)
	}
	for _, body := range []string{"", "{}", `{"recurring":null}`, `{"recurring":[{}]}`} {
		c := stub(t, http.StatusOK, "application/json", body)
		_, err := c.Recurrings(ctx)
		require.Error(t, err, "%q", body)
		require.Contains(t, err.Error(), "GET /v1/recurring", "%q", body)
	}
	c := stub(t, http.StatusServiceUnavailable, "text/html", "<html>busy</html>")
	_, err := c.DeclareRecurring(ctx, r)
	require.ErrorIs(t, err, client.ErrUnavailable)
	require.NotErrorIs(t, err, client.ErrContended)
	c = stub(t, http.StatusGatewayTimeout, "text/plain", "timeout")
	_, err = c.DeclareRecurring(ctx, r)
	require.ErrorIs(t, err, client.ErrOutcomeUnknown)
	require.ErrorIs(t, c.RemoveRecurring(ctx, "beat"), client.ErrOutcomeUnknown)
	_, err = c.Recurrings(ctx)
	require.ErrorIs(t, err, client.ErrUnavailable)
	c = stub(t, http.StatusNoContent, "", "")
	require.NoError(t, c.RemoveRecurring(ctx, "beat"))
}
