package httpapi_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/httpapi"
)

// TestRecurring: PUT declares a schedule (the same again changes nothing),
// GET lists it with its next slots, its slots' jobs run (reserved here),
// DELETE removes it; bad fields are 400 invalid, an unknown name 404, a
// topic the token may not produce to 403 — every answer validated
// against the OpenAPI document.
func TestRecurring(t *testing.T) {
	t.Parallel()
	shopTok, shopSum, err := auth.Generate("shop")
	require.NoError(t, err)
	mailTok, mailSum, err := auth.Generate("mail")
	require.NoError(t, err)
	az, err := auth.New([]auth.Entry{
		{ID: "shop", SHA256: shopSum, Perms: [3][]string{{"beat"}, {"beat"}}},
		{ID: "mail", SHA256: mailSum, Perms: [3][]string{{"mail"}}},
	}, true)
	require.NoError(t, err)
	e := setup(t, az, defaultOpts(), "beat")
	e.tok = shopTok

	body := map[string]any{"topic": "beat", "every_ms": 200, "payload": "tick", "missed": "skip"}
	var got httpapi.Recurring
	e.ok(200, "PUT", "/v1/recurring/beat-200", body, &got)
	require.Equal(t, "beat-200", got.Name)
	require.Equal(t, int64(200), got.EveryMs)
	require.Equal(t, "skip", got.Missed)
	require.Equal(t, []byte("tick"), got.PayloadBase64)
	require.Len(t, got.Next, 3)
	require.Equal(t, 200*time.Millisecond, got.Next[1].Sub(got.Next[0]))
	require.NotNil(t, got.Stored, "the next slot's job is stored")
	e.ok(200, "PUT", "/v1/recurring/beat-200", body, &got)

	jobs := e.reserve(httpapi.ReserveRequest{Topics: []string{"beat"}, WaitMS: 5000})
	require.NotEmpty(t, jobs)
	require.Equal(t, "tick", *jobs[0].Payload)
	require.Contains(t, jobs[0].ID, "beat-200@")
	for _, j := range jobs {
		e.ok(204, "POST", "/v1/jobs/beat/"+j.ID+"/ack", httpapi.AckRequest{Token: j.Token}, nil)
	}

	var list httpapi.RecurringList
	e.ok(200, "GET", "/v1/recurring", nil, &list)
	require.Len(t, list.Recurring, 1)
	require.Equal(t, "beat-200", list.Recurring[0].Name)

	// Another tenant's token may not take the schedule over by declaring
	// its name on a topic of its own (then delete it): replacing a
	// schedule needs the right on the topic it has too. (Found by a red
	// team: the PUT checked the new topic only.)
	e.tok = mailTok
	e.fails(403, apierr.Forbidden, "PUT", "/v1/recurring/beat-200", map[string]any{"topic": "mail", "every_ms": 3600000})
	e.fails(403, apierr.Forbidden, "DELETE", "/v1/recurring/beat-200", nil)
	e.tok = shopTok
	e.ok(200, "GET", "/v1/recurring", nil, &list)
	require.Len(t, list.Recurring, 1)
	require.Equal(t, "beat", list.Recurring[0].Topic, "the schedule is the shop's still")

	e.fails(400, apierr.Invalid, "PUT", "/v1/recurring/bad", map[string]any{"topic": "beat", "cron": "61 * * * *"})
	e.fails(400, apierr.Invalid, "PUT", "/v1/recurring/bad", map[string]any{"topic": "beat", "every_ms": 200, "missed": "never"})
	e.fails(400, apierr.Invalid, "PUT", "/v1/recurring/bad", map[string]any{"topic": "beat", "every_ms": 200, "time_zone": "Mars/Base"})
	// An interval that would wrap time.Duration, and a start too far
	// back for the slots to be reckoned from it.
	e.fails(400, apierr.Invalid, "PUT", "/v1/recurring/bad", map[string]any{"topic": "beat", "every_ms": int64(9_000_000_000_000_000)})
	e.fails(400, apierr.Invalid, "PUT", "/v1/recurring/bad", map[string]any{"topic": "beat", "every_ms": 200, "start": "1000-01-01T00:00:00Z"})
	e.fails(403, apierr.Forbidden, "PUT", "/v1/recurring/other", map[string]any{"topic": "mail", "every_ms": 200})

	e.ok(204, "DELETE", "/v1/recurring/beat-200", nil, nil)
	e.fails(404, apierr.NotFound, "DELETE", "/v1/recurring/beat-200", nil)
	e.ok(200, "GET", "/v1/recurring", nil, &list)
	require.Empty(t, list.Recurring)
}

// TestCancelBatch: POST /v1/cancel gives each job the status its DELETE
// would have had: 204, 404 for an unknown one, 403 for a topic the token
// may not produce to, 400 for a bad id; the cancelled jobs are gone.
func TestCancelBatch(t *testing.T) {
	t.Parallel()
	tok, sum, err := auth.Generate("shop")
	require.NoError(t, err)
	az, err := auth.New([]auth.Entry{{ID: "shop", SHA256: sum, Perms: [3][]string{{"orders"}}}}, true)
	require.NoError(t, err)
	e := setup(t, az, defaultOpts())
	e.tok = tok
	for _, id := range []string{"a", "b"} {
		e.ok(201, "POST", "/v1/jobs/orders", map[string]any{"id": id, "delay_ms": 3600000}, nil)
	}
	var out httpapi.BatchResponse
	e.ok(200, "POST", "/v1/cancel", httpapi.CancelBatchRequest{Jobs: []httpapi.JobRef{
		{Topic: "orders", ID: "a"}, {Topic: "orders", ID: "b"}, {Topic: "orders", ID: "nope"}, {Topic: "mail", ID: "x"}, {Topic: "orders", ID: ""},
	}}, &out)
	var statuses []int
	for _, r := range out.Results {
		statuses = append(statuses, r.Status)
	}
	require.Equal(t, []int{204, 204, 404, 403, 400}, statuses)
	require.Equal(t, 3, out.Failed)
	require.Equal(t, apierr.NotFound, out.Results[2].Error.Code)
	var info map[string]any
	e.ok(200, "GET", "/v1/jobs/orders/a", nil, &info)
	require.Equal(t, "cancelled", info["state"], "in the run history")
	e.fails(400, apierr.Invalid, "POST", "/v1/cancel", httpapi.CancelBatchRequest{})
}
