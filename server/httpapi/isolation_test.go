package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/httpapi"
)

// TestRecurringOtherTenantTopicHidden: a token refused the change of
// another tenant's recurring schedule (PUT or DELETE by its name) learns
// that the name is taken, which a global name cannot hide, but not the
// topic of that schedule, a topic it has no permission on. (Found by a
// red team: the 403's message named it, "token mail may not produce
// topic \"billing.secret\"", so any token could map schedule names to
// other tenants' topics.)
func TestRecurringOtherTenantTopicHidden(t *testing.T) {
	t.Parallel()
	billTok, billSum, err := auth.Generate("bill")
	require.NoError(t, err)
	mailTok, mailSum, err := auth.Generate("mail")
	require.NoError(t, err)
	az, err := auth.New([]auth.Entry{
		{ID: "bill", SHA256: billSum, Perms: [3][]string{{"billing.secret"}}},
		{ID: "mail", SHA256: mailSum, Perms: [3][]string{{"mail"}}},
	}, true)
	require.NoError(t, err)
	e := setup(t, az, defaultOpts())
	e.tok = billTok
	e.ok(200, "PUT", "/v1/recurring/nightly", map[string]any{"topic": "billing.secret", "every_ms": 3600000}, nil)

	e.tok = mailTok
	for _, msg := range []string{
		e.fails(403, apierr.Forbidden, "PUT", "/v1/recurring/nightly", map[string]any{"topic": "mail", "every_ms": 3600000}),
		e.fails(403, apierr.Forbidden, "DELETE", "/v1/recurring/nightly", nil),
	} {
		require.NotContains(t, msg, "billing", "the refusal names the other tenant's topic")
	}
}

// TestOpenServerRefusesCrossSite: a server without tokens serves anyone
// on loopback, but a web page open in a browser on that machine is not
// such a client: its cross-site request (a "simple" POST, text/plain,
// which the browser sends without asking first) must not schedule,
// cancel or reserve. Browsers say where a request comes from
// (Sec-Fetch-Site, Origin); a client that is not a browser sends
// neither and is served as before.
//
// Found by a red team: any page the developer visits could POST to
// http://127.0.0.1:8780/v1/jobs/... and the job was stored (201).
func TestOpenServerRefusesCrossSite(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, defaultOpts(), "t")
	post := func(path, body string, hdr map[string]string) int {
		req, err := http.NewRequest("POST", e.srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "text/plain")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, hdr := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
		{"Origin": "https://evil.example"}, // an older browser: Origin only
	} {
		require.Equal(t, 403, post("/v1/jobs/t", `{"id":"csrf"}`, hdr), "a cross-site page scheduled a job: %v", hdr)
		require.Equal(t, 403, post("/v1/reserve", `{"topics":["t"]}`, hdr), "a cross-site page reserved: %v", hdr)
	}
	e.fails(404, apierr.NotFound, "GET", "/v1/jobs/t/csrf", nil)
	// A client that is not a browser, and a same-origin page, are served.
	require.Equal(t, 201, post("/v1/jobs/t", `{"id":"cli"}`, nil))
	require.Equal(t, 201, post("/v1/jobs/t", `{"id":"page"}`, map[string]string{"Sec-Fetch-Site": "same-origin"}))
}

// TestOpenServerRefusesOtherHosts: a server without tokens answers only
// requests addressed to it by a loopback name (localhost, a name under
// .localhost, an IP address). A web page can make its own host name
// resolve to 127.0.0.1 (DNS rebinding): its requests are then
// same-origin for the browser, which lets the page read the replies
// (jobs, payloads, lists) and write as it likes; only the Host header
// tells them apart. With tokens the server may be reached by any name.
//
// Found by a red team: GET /v1/jobs with Host: evil.example was served.
func TestOpenServerRefusesOtherHosts(t *testing.T) {
	t.Parallel()
	e := setup(t, nil, defaultOpts(), "t")
	port := e.srv.URL[strings.LastIndex(e.srv.URL, ":")+1:]
	get := func(e *env, host string) int {
		req, err := http.NewRequest("GET", e.srv.URL+"/v1/jobs/t/x", nil)
		require.NoError(t, err)
		req.Host = host
		if e.tok != "" {
			req.Header.Set("Authorization", "Bearer "+e.tok)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.evil.example:" + port, "localhost.evil.example:" + port} {
		require.Equal(t, 403, get(e, host), "Host %s served by a server without tokens", host)
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST:" + port, "app.localhost:" + port, "[::1]:" + port, "127.0.0.1"} {
		require.Equal(t, 404, get(e, host), "Host %s refused (404: the route answers, no such job)", host)
	}

	tok, sum, err := auth.Generate("ops")
	require.NoError(t, err)
	az, err := auth.New([]auth.Entry{{ID: "ops", SHA256: sum, Perms: [3][]string{nil, nil, {"*"}}}}, true)
	require.NoError(t, err)
	et := setup(t, az, defaultOpts(), "t")
	et.tok = tok
	require.Equal(t, 404, get(et, "wheelq.internal.example"), "with tokens, any name")
}

// TestReceiptOfAnotherTopic: a consumer of topic a holding the token of
// a job of topic b (the same id) acks, nacks or touches nothing of b by
// putting a in the path (403 with b, as its own token may not consume
// it), nor anything of a: the receipt is the path's topic and id with
// that token, which is not a's job's. b's job stays reserved by its
// consumer, who acks it.
func TestReceiptOfAnotherTopic(t *testing.T) {
	t.Parallel()
	aTok, aSum, err := auth.Generate("a")
	require.NoError(t, err)
	bTok, bSum, err := auth.Generate("b")
	require.NoError(t, err)
	az, err := auth.New([]auth.Entry{
		{ID: "a", SHA256: aSum, Perms: [3][]string{{"a"}, {"a"}}},
		{ID: "b", SHA256: bSum, Perms: [3][]string{{"b"}, {"b"}}},
	}, true)
	require.NoError(t, err)
	e := setup(t, az, defaultOpts(), "a", "b")
	e.tok = bTok
	e.ok(201, "POST", "/v1/jobs/b", map[string]any{"id": "same"}, nil)
	jb := e.reserve(httpapi.ReserveRequest{Topics: []string{"b"}, WaitMS: 10000})
	require.Len(t, jb, 1)
	e.tok = aTok
	e.ok(201, "POST", "/v1/jobs/a", map[string]any{"id": "same"}, nil)
	ja := e.reserve(httpapi.ReserveRequest{Topics: []string{"a"}, WaitMS: 10000})
	require.Len(t, ja, 1)

	for _, op := range []string{"ack", "nack", "touch"} {
		e.fails(403, apierr.Forbidden, "POST", "/v1/jobs/b/same/"+op, map[string]any{"token": jb[0].Token})
		e.fails(409, apierr.ReservationLost, "POST", "/v1/jobs/a/same/"+op, map[string]any{"token": jb[0].Token})
	}
	var res httpapi.AckBatchResponse
	e.ok(200, "POST", "/v1/ack", map[string]any{"receipts": []map[string]any{
		{"topic": "b", "id": "same", "token": jb[0].Token}, {"topic": "a", "id": "same", "token": jb[0].Token}}}, &res)
	require.Equal(t, 403, res.Results[0].Status)
	require.Equal(t, 409, res.Results[1].Status)
	e.ok(204, "POST", "/v1/jobs/a/same/ack", map[string]any{"token": ja[0].Token}, nil)
	e.tok = bTok
	e.ok(204, "POST", "/v1/jobs/b/same/ack", map[string]any{"token": jb[0].Token}, nil)
}
