package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/httpapi"
)

// wait bounds what a test waits for (room for a busy machine).
const wait = 20 * time.Second

type env struct {
	t   *testing.T
	rs  *redistest.Server
	q   *wheelq.Queue
	api *httpapi.API
	srv *httptest.Server
	tok string
}

func defaultOpts() httpapi.Options {
	return httpapi.Options{MaxBody: 2 << 20, MaxBatchBody: 4 << 20, MaxBatch: 100, MaxWait: time.Minute, MaxPollsPerToken: 4}
}

// setup starts a queue on a real redis-server pulling topics, and the API
// over it behind a real HTTP server.
func setup(t *testing.T, az *auth.Authorizer, opts httpapi.Options, pull ...string) *env {
	t.Helper()
	e := setupWith(t, az, opts, pull...)
	e.t = t
	return e
}

// setupTB is setup for a benchmark: no authorizer, the default options.
func setupTB(b *testing.B) *env { return setupServe(b, nil, defaultOpts(), false) }

func setupWith(t testing.TB, az *auth.Authorizer, opts httpapi.Options, pull ...string) *env {
	t.Helper()
	return setupServe(t, az, opts, true, pull...)
}

// setupServe is setupWith; validate wraps the API in the OpenAPI
// validator (tests; a benchmark measures the API alone).
func setupServe(t testing.TB, az *auth.Authorizer, opts httpapi.Options, validate bool, pull ...string) *env {
	t.Helper()
	rs := redistest.Start(t, redistest.Options{})
	q, err := wheelq.New(rs.Client(t), wheelq.Config{Partitions: 4, Backoff: func(int, error) time.Duration { return 10 * time.Millisecond }})
	require.NoError(t, err)
	if len(pull) > 0 {
		require.NoError(t, q.Pull(pull...))
	}
	ctx := context.Background()
	require.NoError(t, q.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_ = q.Shutdown(sctx)
	})
	<-q.Ready()
	if az == nil {
		az, err = auth.New(nil, true)
		require.NoError(t, err)
	}
	api := httpapi.New(q, az, opts)
	var h http.Handler = api
	if validate {
		h = validated(t, api)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{rs: rs, q: q, api: api, srv: srv}
}

// do sends a request with a JSON body (a string as is, else marshalled)
// and returns the status and body.
func (e *env) do(method, path string, body any) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		require.NoError(e.t, err)
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	require.NoError(e.t, err)
	if e.tok != "" {
		req.Header.Set("Authorization", "Bearer "+e.tok)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return resp.StatusCode, out
}

// ok sends a request that must answer status, and decodes its body into
// v (if not nil).
func (e *env) ok(status int, method, path string, body, v any) {
	e.t.Helper()
	got, b := e.do(method, path, body)
	require.Equal(e.t, status, got, "%s %s: %s", method, path, b)
	if v != nil {
		require.NoError(e.t, json.Unmarshal(b, v), "%s", b)
	}
}

// fails sends a request that must fail with status and code.
func (e *env) fails(status int, code apierr.Code, method, path string, body any) string {
	e.t.Helper()
	got, b := e.do(method, path, body)
	var er httpapi.ErrorResponse
	require.NoError(e.t, json.Unmarshal(b, &er), "%s %s: not a JSON error: %s", method, path, b)
	require.Equal(e.t, status, got, "%s %s: %s", method, path, b)
	require.Equal(e.t, code, er.Error.Code, "%s %s: %s", method, path, b)
	require.NotEmpty(e.t, er.Error.Message)
	return er.Error.Message
}

func (e *env) reserve(req httpapi.ReserveRequest) []httpapi.Reserved {
	e.t.Helper()
	var out httpapi.ReserveResponse
	e.ok(200, "POST", "/v1/reserve", req, &out)
	return out.Jobs
}

// TestJobLifecycle goes through every route a producer and a consumer
// use, over real HTTP: schedule (text and binary payloads, byte-exact),
// reserve at the due time and not before, get, ack, nack with a retry,
// touch, cancel, reschedule, batch, list, counts, pause, resume, dead and
// requeue.
func TestJobLifecycle(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, defaultOpts(), "sms")

	// Every byte value, and bytes that are not UTF-8.
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	var sr httpapi.ScheduleResponse
	e.ok(201, "POST", "/v1/jobs/sms", map[string]any{"id": "bin", "payload_base64": base64.StdEncoding.EncodeToString(bin)}, &sr)
	require.Equal(t, "bin", sr.ID)
	text := "héllo \u2603 \"quoted\" \\ \n"
	due := time.Now().Add(300 * time.Millisecond)
	e.ok(201, "POST", "/v1/jobs/sms", map[string]any{"id": "a/b c?d", "payload": text, "at": due, "headers": map[string]string{"traceparent": "00-x"}}, &sr)

	got := e.reserve(httpapi.ReserveRequest{Topics: []string{"sms"}, Max: 10, WaitMS: 5000})
	require.Len(t, got, 1, "the due one only")
	require.Equal(t, "bin", got[0].ID)
	require.Nil(t, got[0].Payload)
	require.Equal(t, bin, got[0].PayloadBase64, "byte-exact")
	e.ok(204, "POST", "/v1/jobs/sms/bin/ack", httpapi.AckRequest{Token: got[0].Token}, nil)

	got = e.reserve(httpapi.ReserveRequest{Topics: []string{"sms"}, WaitMS: 10000, TTRMS: 5000})
	require.Len(t, got, 1)
	require.False(t, time.Now().Before(due), "never before its due time")
	require.Equal(t, "a/b c?d", got[0].ID)
	require.Equal(t, text, *got[0].Payload)
	require.Equal(t, map[string]string{"traceparent": "00-x"}, got[0].Headers)
	require.Equal(t, 1, got[0].Attempt)
	path := "/v1/jobs/sms/" + url.PathEscape("a/b c?d")
	var info wheelq.JobInfo
	e.ok(200, "GET", path, nil, &info)
	require.Equal(t, wheelq.StateRunning, info.State)
	require.True(t, info.Reserved)

	var tr httpapi.TouchResponse
	e.ok(200, "POST", path+"/touch", httpapi.TouchRequest{Token: got[0].Token, TTRMS: 60000}, &tr)
	require.True(t, tr.Deadline.After(got[0].Deadline))
	e.ok(204, "POST", path+"/nack", httpapi.NackRequest{Token: got[0].Token, Error: "partner down", RetryAfterMS: 50}, nil)
	e.fails(409, apierr.ReservationLost, "POST", path+"/ack", httpapi.AckRequest{Token: got[0].Token})
	got = e.reserve(httpapi.ReserveRequest{Topics: []string{"sms"}, WaitMS: 10000})
	require.Len(t, got, 1)
	require.Equal(t, 2, got[0].Attempt)
	require.Equal(t, "partner down", got[0].LastError)
	require.Equal(t, text, *got[0].Payload, "the payload survives a nack by receipt")
	e.ok(204, "POST", path+"/nack", httpapi.NackRequest{Token: got[0].Token, Error: "bad number", Permanent: true}, nil)

	// Many acks in one request: a result per receipt, in order.
	e.ok(201, "POST", "/v1/jobs/sms", map[string]any{"id": "m1"}, nil)
	e.ok(201, "POST", "/v1/jobs/sms", map[string]any{"id": "m2"}, nil)
	two := e.reserve(httpapi.ReserveRequest{Topics: []string{"sms"}, Max: 2, WaitMS: 10000})
	for len(two) < 2 {
		two = append(two, e.reserve(httpapi.ReserveRequest{Topics: []string{"sms"}, WaitMS: 10000})...)
	}
	var ab httpapi.AckBatchResponse
	e.ok(200, "POST", "/v1/ack", httpapi.AckBatchRequest{Receipts: []httpapi.Receipt{
		{Topic: "sms", ID: two[0].ID, Token: two[0].Token}, {Topic: "sms", ID: "m9", Token: "0123456789abc"},
		{Topic: "sms", ID: two[1].ID, Token: two[1].Token}, {Topic: "sms", ID: "m1"}}}, &ab)
	require.Equal(t, []int{204, 409, 204, 400}, []int{ab.Results[0].Status, ab.Results[1].Status, ab.Results[2].Status, ab.Results[3].Status})
	require.Equal(t, apierr.ReservationLost, ab.Results[1].Error.Code)
	require.Equal(t, 2, ab.Failed)
	e.ok(200, "GET", "/v1/jobs/sms/m2", nil, &info)
	require.Equal(t, wheelq.StateDone, info.State)

	// Dead: listed, requeued, reserved again.
	var dead httpapi.ListResponse
	e.ok(200, "GET", "/v1/dead?topic=sms", nil, &dead)
	require.Len(t, dead.Jobs, 1)
	require.Equal(t, "bad number", dead.Jobs[0].LastError)
	e.ok(204, "POST", path+"/requeue", map[string]any{}, nil)
	got = e.reserve(httpapi.ReserveRequest{Topics: []string{"sms"}, WaitMS: 10000})
	require.Len(t, got, 1)
	e.ok(204, "POST", path+"/ack", httpapi.AckRequest{Token: got[0].Token}, nil)
	e.ok(200, "GET", path, nil, &info)
	require.Equal(t, wheelq.StateDone, info.State)

	// Cancel and reschedule; duplicates.
	e.ok(201, "POST", "/v1/jobs/sms", map[string]any{"id": "later", "delay_ms": 3600e3}, nil)
	e.fails(409, apierr.Duplicate, "POST", "/v1/jobs/sms", map[string]any{"id": "later"})
	e.ok(201, "POST", "/v1/jobs/sms", map[string]any{"id": "later", "delay_ms": 7200e3, "on_duplicate": "replace"}, nil)
	at := time.Now().Add(2 * time.Hour).Truncate(time.Microsecond)
	e.ok(204, "POST", "/v1/jobs/sms/later/reschedule", map[string]any{"at": at}, nil)
	e.ok(200, "GET", "/v1/jobs/sms/later", nil, &info)
	require.True(t, info.Due.Equal(at), "%v %v", info.Due, at)
	e.ok(204, "DELETE", "/v1/jobs/sms/later", nil, nil)
	e.fails(404, apierr.NotFound, "DELETE", "/v1/jobs/sms/never", nil)
	e.fails(404, apierr.NotFound, "GET", "/v1/jobs/sms/never", nil)

	// A batch: a result per job, in order.
	var br httpapi.BatchResponse
	e.ok(200, "POST", "/v1/batch", map[string]any{"jobs": []map[string]any{
		{"topic": "sms", "id": "b1", "delay_ms": 3600e3}, {"topic": "sms", "id": "b1"}, {"topic": "", "id": "b3"}, {"topic": "mail", "id": "b4", "delay_ms": 3600e3},
	}}, &br)
	require.Len(t, br.Results, 4)
	require.Equal(t, []int{201, 409, 400, 201}, []int{br.Results[0].Status, br.Results[1].Status, br.Results[2].Status, br.Results[3].Status})
	require.Equal(t, apierr.Duplicate, br.Results[1].Error.Code)
	require.Equal(t, 2, br.Failed)
	// One id twice with replace: the later replaces the earlier, as one
	// at a time.
	e.ok(200, "POST", "/v1/batch", map[string]any{"jobs": []map[string]any{
		{"topic": "mail", "id": "b5", "payload": "first", "delay_ms": 3600e3},
		{"topic": "mail", "id": "b5", "payload": "second", "delay_ms": 3600e3, "on_duplicate": "replace"},
	}}, &br)
	require.Equal(t, []int{201, 201}, []int{br.Results[0].Status, br.Results[1].Status})
	var b5 map[string]any
	e.ok(200, "GET", "/v1/jobs/mail/b5", nil, &b5)
	require.Equal(t, "second", b5["payload"])
	e.ok(204, "DELETE", "/v1/jobs/mail/b5", nil, nil)

	var list httpapi.ListResponse
	e.ok(200, "GET", "/v1/jobs?topic=sms&limit=1", nil, &list)
	require.Len(t, list.Jobs, 1)
	var counts httpapi.CountsResponse
	e.ok(200, "GET", "/v1/counts", nil, &counts)
	byTopic := map[string]httpapi.TopicCounts{}
	for _, c := range counts.Topics {
		byTopic[c.Topic] = c
	}
	require.EqualValues(t, 1, byTopic["sms"].Pending)
	require.EqualValues(t, 1, byTopic["mail"].Pending)

	// Pause holds a pulled topic: reserve says so.
	e.ok(204, "POST", "/v1/topics/sms/pause", nil, nil)
	e.ok(201, "POST", "/v1/jobs/sms", map[string]any{"id": "p1"}, nil)
	// A wait long enough for the job's announcement on a busy machine (or
	// the periodic look, 1 s): the look that finds the topic paused ends it.
	e.fails(409, apierr.Paused, "POST", "/v1/reserve", httpapi.ReserveRequest{Topics: []string{"sms"}, WaitMS: 5000})
	e.ok(204, "POST", "/v1/topics/sms/resume", nil, nil)
	got = e.reserve(httpapi.ReserveRequest{Topics: []string{"sms"}, WaitMS: 10000})
	require.Len(t, got, 1)
	require.Equal(t, "p1", got[0].ID)
}

// TestReserveStream: a stream hands each job over the moment it is
// reserved, one JSON line each, at its due time and not before, and ends
// at its wait; CloseWaits ends it at once.
func TestReserveStream(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, defaultOpts(), "sms")
	base := time.Now().Add(500 * time.Millisecond)
	for i := range 5 {
		e.ok(201, "POST", "/v1/jobs/sms", map[string]any{"id": fmt.Sprint("s", i), "at": base.Add(time.Duration(i) * 100 * time.Millisecond)}, nil)
	}
	resp, err := http.Post(e.srv.URL+"/v1/reserve/stream", "application/json", strings.NewReader(`{"topics":["sms"],"max":10,"wait_ms":3000}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	dec := json.NewDecoder(resp.Body)
	var rcpts []httpapi.Receipt
	for i := range 5 {
		var r httpapi.Reserved
		require.NoError(t, dec.Decode(&r))
		at := time.Now()
		require.Equal(t, fmt.Sprint("s", i), r.ID)
		require.False(t, at.Before(r.Due), "handed over before its due time")
		require.Less(t, at.Sub(r.Due), 2*time.Second, "streamed as it came due, not at the stream's end")
		rcpts = append(rcpts, httpapi.Receipt{Topic: r.Topic, ID: r.ID, Token: r.Token})
	}
	var ab httpapi.AckBatchResponse
	e.ok(200, "POST", "/v1/ack", httpapi.AckBatchRequest{Receipts: rcpts}, &ab)
	require.Zero(t, ab.Failed)
	start := time.Now()
	var extra json.RawMessage
	require.ErrorIs(t, dec.Decode(&extra), io.EOF, "the stream ends at its wait: %s", extra)
	require.Less(t, time.Since(start), 10*time.Second)

	// CloseWaits ends an open stream at once.
	resp2, err := http.Post(e.srv.URL+"/v1/reserve/stream", "application/json", strings.NewReader(`{"topics":["sms"],"wait_ms":50000}`))
	require.NoError(t, err)
	defer resp2.Body.Close()
	for e.api.Waiting() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	start = time.Now()
	e.api.CloseWaits()
	b, err := io.ReadAll(resp2.Body)
	require.NoError(t, err)
	require.Empty(t, b)
	require.Less(t, time.Since(start), 10*time.Second)
}

// TestReserveStreamHoldsMax: a stream reserves no more than its max, then
// ends, as a long poll returns no more than its max: a consumer that
// reads slowly (or not at all) holds what it asked for, not every job
// that came due while the server's writes waited in the connection's
// buffers, their time-to-run running. (Seen failing first: with 300 jobs
// ready and max 10, a stream read for one line held 300 reserved.)
func TestReserveStreamHoldsMax(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, defaultOpts(), "sms")
	const ready = 300
	for from := 0; from < ready; from += 100 {
		jobs := make([]map[string]any, 100)
		for i := range jobs {
			jobs[i] = map[string]any{"topic": "sms", "id": fmt.Sprint("h", from+i)}
		}
		var br httpapi.BatchResponse
		e.ok(200, "POST", "/v1/batch", map[string]any{"jobs": jobs}, &br)
		require.Zero(t, br.Failed)
	}
	running := func() int {
		var c httpapi.CountsResponse
		e.ok(200, "GET", "/v1/counts", nil, &c)
		for _, tc := range c.Topics {
			if tc.Topic == "sms" {
				return int(tc.Running)
			}
		}
		return 0
	}
	resp, err := http.Post(e.srv.URL+"/v1/reserve/stream", "application/json", strings.NewReader(`{"topics":["sms"],"max":10,"wait_ms":20000}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	dec := json.NewDecoder(resp.Body)
	var first httpapi.Reserved
	require.NoError(t, dec.Decode(&first))
	// The consumer stalls; whatever the server was going to write is
	// written by now (ready jobs go at once).
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, 10, running(), "the stream holds its max, not every ready job")
	start := time.Now()
	n := 1
	for {
		var r httpapi.Reserved
		if err := dec.Decode(&r); err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		require.NotEmpty(t, r.Token)
		n++
	}
	require.Equal(t, 10, n, "max jobs, then the stream ends")
	require.Less(t, time.Since(start), 10*time.Second, "it ends with its max, not at its wait")
}

// TestBadInput: every kind of bad request gets a 4xx with its code, never
// a 500, a panic or a hang.
func TestBadInput(t *testing.T) {
	t.Parallel()
	opts := defaultOpts()
	opts.MaxBody = 64 << 10
	opts.MaxBatchBody = 256 << 10
	e := setup(t, nil, opts, "sms")
	long := strings.Repeat("x", 600)
	for _, c := range []struct {
		method, path string
		body         any
		status       int
		code         apierr.Code
	}{
		{"POST", "/v1/jobs/sms", `{"id":`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", ``, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `[]`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `{"id":1}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `{"idd":"x"}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `{"id":"x"} {}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `{"payload_base64":"not base64!"}`, 400, apierr.Invalid},
		// Not UTF-8, or a lone surrogate: json would store U+FFFD in its
		// place, silently (found by a red team); and a body that is not
		// an object.
		{"POST", "/v1/jobs/sms", "{\"payload\":\"a\xffb\"}", 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", "{\"id\":\"\xff\xfe\"}", 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `{"payload":"a\ud800c"}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `{"payload":"a\udc00c"}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `{"payload":"a\ud800\u0041"}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `null`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", ` "x" `, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `{"payload":"a","payload_base64":"YQ=="}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `{"delay_ms":-1}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `{"delay_ms":1e300}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `{"delay_ms":1,"at":"2030-01-01T00:00:00Z"}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `{"at":"tomorrow"}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `{"delay_ms":3.2e10}`, 400, apierr.Invalid}, // past max_delay (a year)
		{"POST", "/v1/jobs/sms", `{"max_attempts":-3}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", `{"on_duplicate":"ignore"}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", map[string]any{"id": long}, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", map[string]any{"id": "a\x00b"}, 400, apierr.Invalid},
		{"POST", "/v1/jobs/" + url.PathEscape("a\x01"), `{}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/" + url.PathEscape("a/b"), `{}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms", map[string]any{"headers": manyHeaders(40)}, 413, apierr.TooLarge},
		{"POST", "/v1/jobs/sms", map[string]any{"payload": strings.Repeat("p", 70<<10)}, 413, apierr.TooLarge},
		{"POST", "/v1/batch", `{"jobs":[]}`, 400, apierr.Invalid},
		{"POST", "/v1/batch", map[string]any{"jobs": make([]map[string]any, 101)}, 413, apierr.TooLarge},
		{"POST", "/v1/batch", `{"jobs":[` + strings.Repeat(`{"topic":"sms"},`, 1_000_000) + `{"topic":"sms"}]}`, 413, apierr.TooLarge},
		{"POST", "/v1/ack", `{"receipts":[]}`, 400, apierr.Invalid},
		{"POST", "/v1/ack", map[string]any{"receipts": make([]map[string]any, 101)}, 413, apierr.TooLarge},
		{"POST", "/v1/reserve", `{"topics":[]}`, 400, apierr.Invalid},
		{"POST", "/v1/reserve", `{"topics":["sms"],"wait_ms":31536000000}`, 400, apierr.Invalid},
		{"POST", "/v1/reserve", `{"topics":["sms"],"wait_ms":-1}`, 400, apierr.Invalid},
		{"POST", "/v1/reserve", `{"topics":["sms"],"max":1001}`, 400, apierr.Invalid},
		{"POST", "/v1/reserve", `{"topics":["sms"],"ttr_ms":5}`, 400, apierr.Invalid},
		{"POST", "/v1/reserve", `{"topics":["sms"],"ttr_ms":9223372036854775807}`, 400, apierr.Invalid},
		{"POST", "/v1/reserve", `{"topics":["mail"]}`, 409, apierr.TopicMode},
		{"POST", "/v1/reserve/stream", `{"topics":["sms"],"wait_ms":31536000000}`, 400, apierr.Invalid},
		{"POST", "/v1/reserve/stream", `{"topics":[]}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms/x/ack", `{}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms/x/ack", `{"token":"bogus"}`, 409, apierr.ReservationLost},
		{"POST", "/v1/jobs/sms/x/nack", `{"token":"0123456789abcdef"}`, 409, apierr.ReservationLost},
		{"POST", "/v1/jobs/sms/x/nack", `{"token":"0123456789abcdef","retry_after_ms":-5}`, 400, apierr.Invalid},
		{"POST", "/v1/jobs/sms/x/touch", `{"token":"0123456789abcdef","ttr_ms":1}`, 400, apierr.Invalid},
		{"GET", "/v1/jobs?limit=0", nil, 400, apierr.Invalid},
		{"GET", "/v1/jobs?limit=abc", nil, 400, apierr.Invalid},
		{"GET", "/v1/jobs?state=bogus", nil, 400, apierr.Invalid},
		{"GET", "/v1/jobs?due_after=yesterday", nil, 400, apierr.Invalid},
		{"GET", "/v1/jobs?cursor=%00%01", nil, 400, apierr.Invalid},
		{"GET", "/v1/jobs?tpoic=sms", nil, 400, apierr.Invalid},
		{"GET", "/v1/dead?state=pending", nil, 400, apierr.Invalid},
		{"GET", "/v1/nothing", nil, 404, apierr.NoRoute},
		{"PUT", "/v1/counts", nil, 405, apierr.MethodNotAllow},
	} {
		name := fmt.Sprintf("%s %s", c.method, c.path)
		if len(name) > 80 {
			name = name[:80]
		}
		t.Run(name, func(t *testing.T) {
			ee := *e
			ee.t = t
			ee.fails(c.status, c.code, c.method, c.path, c.body)
		})
	}
}

func manyHeaders(n int) map[string]string {
	h := map[string]string{}
	for i := range n {
		h[fmt.Sprint("h", i)] = "v"
	}
	return h
}

// TestBodyLimitWithoutReadingWhole: a body announced past the limit is
// refused at once, not read; one that streams past it (chunked) is cut
// off at the limit. The client here sends 4 KiB and then nothing more, as
// a slow or hostile one would.
func TestBodyLimitWithoutReadingWhole(t *testing.T) {
	t.Parallel()
	opts := defaultOpts()
	opts.MaxBody = 1 << 10
	e := setup(t, nil, opts)
	host := strings.TrimPrefix(e.srv.URL, "http://")
	chunk := `{"payload":"` + strings.Repeat("x", 4<<10)
	for _, head := range []string{
		"Content-Length: 1073741824\r\n\r\n" + chunk,
		"Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n", len(chunk), chunk),
	} {
		c, err := net.Dial("tcp", host)
		require.NoError(t, err)
		_, err = io.WriteString(c, "POST /v1/jobs/t HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"+head)
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "answered without the rest of the body")
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		c.Close()
		require.Equal(t, 413, resp.StatusCode, "%s", b)
		require.Contains(t, string(b), `"too_large"`)
	}
}

// TestAuth: no token is 401, a wrong one 401, a token without the
// permission for the topic 403; each permission covers its routes.
func TestAuth(t *testing.T) {
	t.Parallel()
	prodTok, prodSum, err := auth.Generate("shop")
	require.NoError(t, err)
	consTok, consSum, err := auth.Generate("worker")
	require.NoError(t, err)
	adminTok, adminSum, err := auth.Generate("ops")
	require.NoError(t, err)
	az, err := auth.New([]auth.Entry{
		{ID: "shop", SHA256: prodSum, Perms: [3][]string{{"orders.*"}}},
		{ID: "worker", SHA256: consSum, Perms: [3][]string{nil, {"orders.cancel"}}},
		{ID: "ops", SHA256: adminSum, Perms: [3][]string{nil, nil, {"*"}}},
	}, true)
	require.NoError(t, err)
	e := setup(t, az, defaultOpts(), "orders.cancel")

	e.fails(401, apierr.Unauthorized, "POST", "/v1/jobs/orders.cancel", `{}`)
	e.tok = "wq_shop_wrong"
	e.fails(401, apierr.Unauthorized, "POST", "/v1/jobs/orders.cancel", `{}`)
	e.tok = strings.Replace(prodTok, "shop", "nobody", 1)
	e.fails(401, apierr.Unauthorized, "POST", "/v1/jobs/orders.cancel", `{}`)

	e.tok = prodTok
	e.ok(201, "POST", "/v1/jobs/orders.cancel", map[string]any{"id": "o1"}, nil)
	e.fails(403, apierr.Forbidden, "POST", "/v1/jobs/mail", `{}`)
	e.fails(403, apierr.Forbidden, "POST", "/v1/reserve", httpapi.ReserveRequest{Topics: []string{"orders.cancel"}})
	e.fails(403, apierr.Forbidden, "GET", "/v1/jobs", nil)
	e.fails(403, apierr.Forbidden, "POST", "/v1/topics/orders.cancel/pause", nil)
	e.ok(200, "GET", "/v1/jobs/orders.cancel/o1", nil, nil)
	var br httpapi.BatchResponse
	e.ok(200, "POST", "/v1/batch", map[string]any{"jobs": []map[string]any{{"topic": "orders.x"}, {"topic": "mail"}}}, &br)
	require.Equal(t, 201, br.Results[0].Status)
	require.Equal(t, apierr.Forbidden, br.Results[1].Error.Code)

	e.tok = consTok
	e.fails(403, apierr.Forbidden, "POST", "/v1/jobs/orders.cancel", `{}`)
	got := e.reserve(httpapi.ReserveRequest{Topics: []string{"orders.cancel"}, WaitMS: 10000})
	require.Len(t, got, 1)
	e.ok(204, "POST", "/v1/jobs/orders.cancel/o1/ack", httpapi.AckRequest{Token: got[0].Token}, nil)
	var counts httpapi.CountsResponse
	e.ok(200, "GET", "/v1/counts", nil, &counts)
	require.Empty(t, counts.Topics, "counts show only the topics a token administers")

	e.tok = adminTok
	e.ok(200, "GET", "/v1/jobs", nil, nil)
	// The scheme's case does not matter (RFC 9110).
	req, err := http.NewRequest("GET", e.srv.URL+"/v1/jobs", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "bearer "+adminTok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, "bearer in lower case")
	e.ok(204, "POST", "/v1/topics/orders.cancel/pause", nil, nil)
	e.ok(200, "GET", "/v1/counts", nil, &counts)
	require.NotEmpty(t, counts.Topics)

	// Health and the document need no token.
	e.tok = ""
	e.ok(200, "GET", "/healthz", nil, nil)
	e.ok(200, "GET", "/v1/openapi.json", nil, nil)
}

// TestLongPolls: a token holds at most MaxPollsPerToken long polls (429
// past it), and CloseWaits answers the open ones at once, empty.
func TestLongPolls(t *testing.T) {
	t.Parallel()
	opts := defaultOpts()
	opts.MaxPollsPerToken = 2
	e := setup(t, nil, opts, "sms")
	type res struct {
		status int
		body   []byte
		took   time.Duration
	}
	done := make(chan res, 2)
	for range 2 {
		go func() {
			start := time.Now()
			s, b := e.do("POST", "/v1/reserve", httpapi.ReserveRequest{Topics: []string{"sms"}, WaitMS: 60000})
			done <- res{s, b, time.Since(start)}
		}()
	}
	deadline := time.Now().Add(wait)
	for e.api.Waiting() < 2 {
		require.True(t, time.Now().Before(deadline), "the two polls never waited")
		time.Sleep(5 * time.Millisecond)
	}
	e.fails(429, apierr.TooManyWaiters, "POST", "/v1/reserve", httpapi.ReserveRequest{Topics: []string{"sms"}, WaitMS: 60000})
	start := time.Now()
	e.api.CloseWaits()
	for range 2 {
		r := <-done
		require.Equal(t, 200, r.status, "%s", r.body)
		require.JSONEq(t, `{"jobs":[]}`, string(r.body))
	}
	require.Less(t, time.Since(start), 10*time.Second, "answered at once, not at their wait's end")
}

// TestClientGoneLosesNothing: a long poll (an hour's time-to-run) whose
// client goes away holds nothing: a job that comes due afterwards goes to
// the next poll at once, on its first attempt.
func TestClientGoneLosesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, defaultOpts(), "sms")
	ctx, cancel := context.WithCancel(context.Background())
	body, err := json.Marshal(httpapi.ReserveRequest{Topics: []string{"sms"}, WaitMS: 60000, TTRMS: 3600000})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/v1/reserve", bytes.NewReader(body))
	require.NoError(t, err)
	gone := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	deadline := time.Now().Add(wait)
	for e.api.Waiting() < 1 {
		require.True(t, time.Now().Before(deadline), "the poll never waited")
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	require.Error(t, <-gone)
	for e.api.Waiting() > 0 {
		require.True(t, time.Now().Before(deadline), "the poll of a gone client never ended")
		time.Sleep(5 * time.Millisecond)
	}
	e.ok(201, "POST", "/v1/jobs/sms", map[string]any{"id": "j", "payload": "p", "delay_ms": 100}, nil)
	start := time.Now()
	got := e.reserve(httpapi.ReserveRequest{Topics: []string{"sms"}, WaitMS: 5000})
	require.Len(t, got, 1, "waited %v", time.Since(start))
	require.Equal(t, 1, got[0].Attempt)
}

// TestReserveReplyInOneWrite: a long poll's reply, flushed before the
// handler returns (to know it was written), carries its length: sent
// chunked, it took a second write for the last chunk, and its client a
// second read, on every delivery.
func TestReserveReplyInOneWrite(t *testing.T) {
	t.Parallel()
	e := setupServe(t, nil, defaultOpts(), false, "one")
	e.t = t
	e.ok(201, "POST", "/v1/jobs/one", map[string]any{"id": "j", "payload": "x"}, nil)
	resp, err := http.Post(e.srv.URL+"/v1/reserve", "application/json", strings.NewReader(`{"topics":["one"],"wait_ms":10000}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), `"id":"j"`)
	require.Empty(t, resp.TransferEncoding, "chunked")
	require.Equal(t, int64(len(body)), resp.ContentLength)
}

// TestClientGoneMidCall: a client that goes away while its request waits
// for Redis is not an internal error: the access log says 499, and no
// ERROR line is written (any token holder could otherwise fill the
// server's 5xx counts and error log). Found by a red team: 500 and an
// ERROR line "internal error ... context canceled".
func TestClientGoneMidCall(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var logs bytes.Buffer
	opts := defaultOpts()
	opts.Access = true
	opts.Logger = slog.New(slog.NewJSONHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(b)
	}), nil))
	// Not through the OpenAPI validator: 499 is the access log's, never
	// a client's (none is left to read it).
	e := setupServe(t, nil, opts, false)
	e.rs.RequireReal(t)
	rdb, ctx := e.rs.Client(t), context.Background()
	// Counts reads Redis: held by a pause of every client, the request's
	// client gives up first.
	require.NoError(t, rdb.Do(ctx, "CLIENT", "PAUSE", 1500, "ALL").Err())
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, "GET", e.srv.URL+"/v1/counts", nil)
	require.NoError(t, err)
	_, err = http.DefaultClient.Do(req)
	require.Error(t, err)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logs.String(), `"route":"GET /v1/counts"`)
	}, wait, 10*time.Millisecond, "the request's access line")
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, logs.String(), `"status":499`, logs.String())
	require.NotContains(t, logs.String(), `"level":"ERROR"`)
}

// writerFunc is an io.Writer of a function.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestRevokedWhileWaiting: a reload of the tokens that drops the one an
// open long poll or stream waits with ends it with 401, and what comes
// due afterwards goes to a consumer still allowed, not to it. (Found by a
// red team: an open stream went on receiving jobs, payloads and all.)
func TestRevokedWhileWaiting(t *testing.T) {
	t.Parallel()
	oldTok, oldSum, err := auth.Generate("old")
	require.NoError(t, err)
	newTok, newSum, err := auth.Generate("new")
	require.NoError(t, err)
	both, err := auth.New([]auth.Entry{
		{ID: "old", SHA256: oldSum, Perms: [3][]string{{"sms"}, {"sms"}}},
		{ID: "new", SHA256: newSum, Perms: [3][]string{{"sms"}, {"sms"}}},
	}, true)
	require.NoError(t, err)
	onlyNew, err := auth.New([]auth.Entry{{ID: "new", SHA256: newSum, Perms: [3][]string{{"sms"}, {"sms"}}}}, true)
	require.NoError(t, err)
	e := setup(t, both, defaultOpts(), "sms")

	open := func(path string) (chan *http.Response, chan []byte) {
		body, err := json.Marshal(httpapi.ReserveRequest{Topics: []string{"sms"}, WaitMS: 30000})
		require.NoError(t, err)
		req, err := http.NewRequest("POST", e.srv.URL+path, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+oldTok)
		done, read := make(chan *http.Response, 1), make(chan []byte, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- nil
				read <- nil
				return
			}
			defer resp.Body.Close()
			done <- resp
			b, _ := io.ReadAll(resp.Body)
			read <- b
		}()
		return done, read
	}
	pollDone, pollBody := open("/v1/reserve")
	streamDone, streamBody := open("/v1/reserve/stream")
	deadline := time.Now().Add(wait)
	for e.api.Waiting() < 2 {
		require.True(t, time.Now().Before(deadline), "the polls never waited")
		time.Sleep(5 * time.Millisecond)
	}
	stream := <-streamDone
	require.NotNil(t, stream)
	require.Equal(t, 200, stream.StatusCode, "a stream answers 200 at once")

	e.api.SetAuthorizer(onlyNew) // a reload that drops the old token
	_, err = e.q.Schedule(context.Background(), "sms", []byte("secret"), wheelq.ID("after"))
	require.NoError(t, err)

	poll := <-pollDone
	require.NotNil(t, poll)
	require.Equal(t, 401, poll.StatusCode)
	b := <-pollBody
	require.Contains(t, string(b), `"unauthorized"`)
	b = <-streamBody
	require.NotContains(t, string(b), "after", "no job on the revoked stream")
	require.Contains(t, string(b), `"unauthorized"`, "the stream's last line says why it ended")

	e.tok = newTok
	got := e.reserve(httpapi.ReserveRequest{Topics: []string{"sms"}, WaitMS: 5000})
	require.Len(t, got, 1, "the job goes to a consumer still allowed")
	require.Equal(t, "after", got[0].ID)
	require.Equal(t, 1, got[0].Attempt, "handed out once")
}

// TestInflightBodyBudget: the bodies held at once are bounded: while one
// request's body is being read, another that would pass
// MaxInflightBody is answered 503 unavailable (Retry-After) at once,
// unread; once the first is answered, the budget is free again. Many
// large batches at once cannot run the server out of memory.
func TestInflightBodyBudget(t *testing.T) {
	t.Parallel()
	opts := defaultOpts()
	opts.MaxBody, opts.MaxInflightBody = 64<<10, 100<<10
	e := setupServe(t, nil, opts, false, "sms")
	e.t = t
	body := func(id string) string {
		prefix := `{"id":"` + id + `","payload":"`
		return prefix + strings.Repeat("x", 60000-len(prefix)-2) + `"}`
	}
	// The first request's body comes slowly: all but its last bytes.
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	first := body("slow")
	_, err = fmt.Fprintf(conn, "POST /v1/jobs/sms HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(first), first[:100])
	require.NoError(t, err)
	// Wait until the server holds the slow body's bytes: a second request
	// sent before that could take the budget first, and the slow one be
	// the one refused.
	deadline := time.Now().Add(wait)
	for e.api.InflightBody() == 0 {
		require.True(t, time.Now().Before(deadline), "the slow body was never held")
		time.Sleep(5 * time.Millisecond)
	}
	require.Equal(t, int64(len(first)), e.api.InflightBody(), "the slow body holds its Content-Length")
	st, b := e.do("POST", "/v1/jobs/sms", body("second"))
	require.Equal(t, 503, st, "past the budget while the first body is held: %s", b)
	var out struct{ Error struct{ Code string } }
	require.NoError(t, json.Unmarshal(b, &out), "%s", b)
	require.Equal(t, "unavailable", out.Error.Code, "%s", b)
	require.Equal(t, int64(len(first)), e.api.InflightBody(), "the refused body gave its bytes back")
	_, err = conn.Write([]byte(first[100:]))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 201, resp.StatusCode, "the slow one went through")
	require.Zero(t, e.api.InflightBody(), "its bytes given back before its reply went out")
	st, b = e.do("POST", "/v1/jobs/sms", body("third"))
	require.Equal(t, 201, st, "the budget is free again: %s", b)
}

// TestLongPollHoldsNoBodyBudget: a long poll gives its body's bytes back
// to MaxInflightBody once its body is read, not when its reply begins
// after the wait: idle consumers' polls (a chunked body counts as the
// whole body limit) held the budget for as long as they waited, and the
// server refused other requests 503 while holding nothing.
func TestLongPollHoldsNoBodyBudget(t *testing.T) {
	t.Parallel()
	opts := defaultOpts()
	opts.MaxBody, opts.MaxInflightBody = 64<<10, 100<<10
	e := setupServe(t, nil, opts, false, "idle", "sms")
	e.t = t
	// A long poll with a chunked body (no Content-Length): counted as
	// MaxBody while it is read.
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	poll := `{"topics":["idle"],"wait_ms":30000}`
	_, err = fmt.Fprintf(conn, "POST /v1/reserve HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(poll), poll)
	require.NoError(t, err)
	deadline := time.Now().Add(wait)
	for e.api.Waiting() == 0 {
		require.True(t, time.Now().Before(deadline), "the long poll never waited")
		time.Sleep(5 * time.Millisecond)
	}
	require.Zero(t, e.api.InflightBody(), "a waiting long poll holds no body bytes")
	prefix := `{"id":"big","payload":"`
	big := prefix + strings.Repeat("x", 60000-len(prefix)-2) + `"}`
	st, b := e.do("POST", "/v1/jobs/sms", big)
	require.Equal(t, 201, st, "the budget is free while the poll waits: %s", b)
	require.Zero(t, e.api.InflightBody())
	require.Equal(t, 1, e.api.Waiting(), "the poll still waits")
}

// TestInflightBodyGivenBackBeforeReply: a request's body bytes are given
// back to MaxInflightBody before its reply is written, not when its
// handler returns. A reply past net/http's buffer (a batch's, listing its
// ids) reaches the client before the handler returns: a client that sent
// its next request at once was refused 503 for bytes no longer held, on
// timing. Here the handler is held in its first write of the reply, once
// that is flushed (as a reply past the buffer is): the client has read the
// whole reply, and the budget must be free for another batch of that size.
func TestInflightBodyGivenBackBeforeReply(t *testing.T) {
	t.Parallel()
	opts := defaultOpts()
	opts.MaxBatchBody = 64 << 10
	batch := func(prefix string) []byte {
		var req httpapi.BatchRequest
		for i := range 100 {
			p := strings.Repeat("x", 400)
			req.Jobs = append(req.Jobs, httpapi.BatchJob{Topic: "sms",
				ScheduleRequest: httpapi.ScheduleRequest{ID: fmt.Sprintf("%s-%03d", prefix, i), Payload: &p}})
		}
		b, err := json.Marshal(req)
		require.NoError(t, err)
		return b
	}
	first, second := batch("first"), batch("again")
	require.Equal(t, len(first), len(second))
	// Room for one such batch, not two.
	opts.MaxInflightBody = int64(len(first)) + 100
	e := setupServe(t, nil, opts, false, "sms")
	e.t = t

	written, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	held := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.api.ServeHTTP(&holdingWriter{ResponseWriter: w, once: &once, written: written, hold: hold}, r)
	}))
	defer held.Close()
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(hold) }) }
	defer release()

	type result struct {
		resp *http.Response
		body []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.Post(held.URL+"/v1/batch", "application/json", bytes.NewReader(first))
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- result{resp, b, err}
	}()
	select {
	case <-written:
	case <-time.After(wait):
		t.Fatal("the batch's reply was never written")
	}
	// The handler has not returned, and its whole reply is at the client.
	var res result
	select {
	case res = <-done:
	case <-time.After(wait):
		t.Fatal("the batch's reply never reached the client")
	}
	require.NoError(t, res.err)
	require.Equal(t, 200, res.resp.StatusCode, "%s", res.body)
	require.Greater(t, len(res.body), 4<<10, "a reply past net/http's buffer")
	var out httpapi.BatchResponse
	require.NoError(t, json.Unmarshal(res.body, &out), "%s", res.body)
	require.Len(t, out.Results, 100)
	require.Zero(t, out.Failed, "%s", res.body)

	st, b := e.do("POST", "/v1/batch", string(second))
	require.Equal(t, 200, st, "the next batch, sent once the reply is read, is not refused: %s", b)
	require.Zero(t, e.api.InflightBody(), "the reply is read: its request's body bytes are given back")

	release()
	held.Close() // waits for the held handler to return
	require.Zero(t, e.api.InflightBody(), "given back once, not again when the handler returns")

	// Refused and failed bodies give their bytes back once too.
	e.fails(400, apierr.Invalid, "POST", "/v1/batch", `{"jobs": [}`)
	e.fails(413, apierr.TooLarge, "POST", "/v1/batch", `{"jobs": [], "x": "`+strings.Repeat("x", 64<<10)+`"}`)
	e.fails(400, apierr.Invalid, "POST", "/v1/batch", `{"jobs": []}`)
	require.Zero(t, e.api.InflightBody())
	st, b = e.do("POST", "/v1/batch", string(first))
	require.Equal(t, 200, st, "%s", b)
	require.Zero(t, e.api.InflightBody())
}

// holdingWriter flushes the first write of a reply, closes written, and
// holds that write (and so its handler) until hold is closed: as a reply
// past net/http's buffer, it is at the client before the handler returns.
type holdingWriter struct {
	http.ResponseWriter
	once          *sync.Once
	written, hold chan struct{}
}

func (h *holdingWriter) Write(b []byte) (int, error) {
	n, err := h.ResponseWriter.Write(b)
	h.once.Do(func() {
		_ = http.NewResponseController(h.ResponseWriter).Flush()
		close(h.written)
		<-h.hold
	})
	return n, err
}

// Unwrap lets http.ResponseController reach the connection.
func (h *holdingWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// TestNonCanonicalPaths: a path with an empty, "." or ".." segment gets
// the API's JSON 404 (no_route), never net/http's redirect with an HTML
// body: API clients follow no redirects and read only JSON errors. The
// message names the path the route may have been.
func TestNonCanonicalPaths(t *testing.T) {
	e := setup(t, nil, defaultOpts(), "sms")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct{ method, path, clean string }{
		{"GET", "//v1/jobs", "/v1/jobs"},
		{"GET", "/v1//jobs/sms/x", "/v1/jobs/sms/x"},
		{"GET", "/v1/jobs/./sms/x", "/v1/jobs/sms/x"},
		{"GET", "/v1/../v1/jobs", "/v1/jobs"},
		{"POST", "/v1/jobs/sms/x/../y/ack", "/v1/jobs/sms/y/ack"},
		{"DELETE", "/v1/jobs/sms/x/.", "/v1/jobs/sms/x"},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			req, err := http.NewRequest(c.method, e.srv.URL+c.path, nil)
			require.NoError(t, err)
			resp, err := noFollow.Do(req)
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, 404, resp.StatusCode, "%s", b)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "%s", b)
			require.Empty(t, resp.Header.Get("Location"))
			var er httpapi.ErrorResponse
			require.NoError(t, json.Unmarshal(b, &er), "%s", b)
			require.Equal(t, apierr.NoRoute, er.Error.Code, "%s", b)
			if c.clean != c.path {
				require.Contains(t, er.Error.Message, c.clean, "%s", b)
			}
		})
	}
	// Escaped dots are an id's characters, not a path's segments.
	e.ok(201, "POST", "/v1/jobs/sms", map[string]any{"id": "..", "payload": "x", "delay_ms": 60000}, nil)
	e.ok(200, "GET", "/v1/jobs/sms/%2E%2E", nil, nil)
}
