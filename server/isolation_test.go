package server_test

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/config"
	"github.com/wheelq/wheelq/server/internal/servertest"
)

// TestDashboardUnrecurOtherTenantTopicHidden: the dashboard's unrecur
// action, asked by a token that administers its own topic for another
// tenant's schedule (by name), is refused without naming that
// schedule's topic, one the token has no permission on.
//
// Found by a red team: the refusal is 404 "recurring schedule "nightly"
// is of topic "billing.secret", not "mail"", so an admin of one topic
// can map any schedule name to another tenant's topic. The message is
// the dashboard package's (dashboard/api.go, unrecur): it now answers
// as if no schedule of that name were of the caller's topic.
func TestDashboardUnrecurOtherTenantTopicHidden(t *testing.T) {
	billTok, billSum, err := auth.Generate("bill")
	require.NoError(t, err)
	mailTok, mailSum, err := auth.Generate("mail")
	require.NoError(t, err)
	a := servertest.Start(t, func(c *config.Config) {
		c.Queue.Pull = []string{"billing.secret", "mail"}
		c.Tokens = []config.Token{
			{ID: "bill", SHA256: billSum, Produce: []string{"billing.secret"}},
			{ID: "mail", SHA256: mailSum, Admin: []string{"mail"}},
		}
	})
	do := func(method, path, auth string, body string) (int, string) {
		req, err := http.NewRequest(method, a.HTTP+path, bytes.NewReader([]byte(body)))
		require.NoError(t, err)
		req.Header.Set("Authorization", auth)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Wheelq-Dashboard", "1")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	st, b := do("PUT", "/v1/recurring/nightly", "Bearer "+billTok, `{"topic":"billing.secret","every_ms":3600000}`)
	require.Equal(t, 200, st, b)

	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("me:"+mailTok))
	st, b = do("POST", "/ui/api/unrecur", basic, `{"topic":"mail","id":"nightly"}`)
	require.NotEqual(t, 200, st, "another tenant's schedule removed: %s", b)
	require.NotContains(t, b, "billing", "the refusal names the other tenant's topic")
}

// TestOpenServerOtherHosts: a server without tokens answers a request
// addressed to a host name that is not a loopback one with 403 on every
// route that tells of jobs: the API, the dashboard, /metrics (a page
// that rebinds its name to 127.0.0.1 would otherwise read them,
// same-origin); /healthz answers any name; a loopback name or an IP
// address is served.
func TestOpenServerOtherHosts(t *testing.T) {
	a := servertest.Start(t, func(c *config.Config) { c.Queue.Pull = []string{"t"} })
	get := func(path, host string) int {
		req, err := http.NewRequest("GET", a.HTTP+path, nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/ui/", "/ui/api/overview", "/metrics", "/v1/counts", "/v1/openapi.json"} {
		require.Equal(t, 403, get(path, "rebound.example"), path)
		require.Equal(t, 200, get(path, "localhost"), path)
	}
	require.Equal(t, 200, get("/healthz", "rebound.example"))
}
