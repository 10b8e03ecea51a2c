package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

// TestServerNonCanonicalPaths: on every prefix the server serves (the
// API, /metrics, the dashboard under /ui/), a path with an empty, "." or
// ".." segment is answered the API's JSON 404 (no_route), not net/http's
// redirect with an HTML body; the dashboard's pages and files are still
// served, and /ui still leads a browser to /ui/.
func TestServerNonCanonicalPaths(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	p := startServer(t, nil, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs),
		"-set", "http.metrics=true", "-set", "http.ui=true")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(method, path string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(method, p.URL+path, nil)
		require.NoError(t, err)
		resp, err := noFollow.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, resp.Header, string(b)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "//v1/jobs"},
		{"GET", "/v1//jobs/x"},
		{"GET", "/v1/jobs/./x"},
		{"GET", "/v1/../v1/jobs"},
		{"POST", "//v1/jobs/mail"},
		{"GET", "//metrics"},
		{"GET", "/metrics/."},
		{"GET", "/ui/../metrics"},
		{"GET", "//ui/"},
		{"GET", "/ui//static/app.js"},
		{"GET", "/ui/static/../index.html"},
		{"POST", "/ui/./api/pause"},
	} {
		st, h, body := get(c.method, c.path)
		require.Equal(t, 404, st, "%s %s: %s", c.method, c.path, body)
		require.Equal(t, "application/json", h.Get("Content-Type"), "%s %s: %s", c.method, c.path, body)
		require.Empty(t, h.Get("Location"), "%s %s", c.method, c.path)
		var e struct {
			Error struct{ Code, Message string }
		}
		require.NoError(t, json.Unmarshal([]byte(body), &e), "%s %s: %s", c.method, c.path, body)
		require.Equal(t, "no_route", e.Error.Code, "%s %s: %s", c.method, c.path, body)
	}
	// What was served before still is.
	st, _, body := get("GET", "/ui/")
	require.Equal(t, 200, st, body)
	require.Contains(t, body, "<html")
	st, h, _ := get("GET", "/ui/static/app.js")
	require.Equal(t, 200, st)
	require.Contains(t, h.Get("Content-Type"), "javascript")
	st, h, _ = get("GET", "/ui")
	require.Contains(t, []int{301, 307, 308}, st, "/ui leads to /ui/")
	require.Equal(t, "/ui/", h.Get("Location"))
	st, _, body = get("GET", "/metrics")
	require.Equal(t, 200, st)
	require.True(t, strings.Contains(body, "go_goroutines"), "metrics served")
	st, _, _ = get("GET", "/v1/jobs")
	require.Equal(t, 200, st)
}
