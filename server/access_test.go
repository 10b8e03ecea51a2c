package server_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/server/auth"
)

// TestAccessLog: with log.access, every request is one JSON line of the
// log (msg "http"): its method, path, the route that served it, status,
// size and the token's id. The API's routes, a path no route serves,
// /metrics and the dashboard alike; with log.access off, none.
func TestAccessLog(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	tok, sum, err := auth.Generate("ops")
	require.NoError(t, err)
	tokens := writeFile(t, "tokens", "ops "+sum+" admin=* produce=* consume=*\n")
	lines := func(log string) []map[string]any {
		var out []map[string]any
		sc := bufio.NewScanner(strings.NewReader(log))
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "http" {
				out = append(out, m)
			}
		}
		return out
	}
	args := []string{"-addr", "127.0.0.1:0", "-redis-url", redisURL(rs), "-pull", "mail", "-set", "log.format=json",
		"-set", "http.metrics=true", "-set", "http.ui=true", "-set", "token_file=" + tokens}
	p := startServer(t, nil, append(args, "-set", "log.access=true")...)
	require.Equal(t, 201, call(t, "POST", p.URL+"/v1/jobs/mail", tok, map[string]any{"id": "a1", "payload": "x", "delay_ms": 60000}, nil))
	require.Equal(t, 404, call(t, "GET", p.URL+"/nope", tok, nil, nil))
	require.Equal(t, 401, call(t, "GET", p.URL+"/v1/counts", "", nil, nil))
	get := func(path string) int {
		req, _ := http.NewRequest("GET", p.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 200, get("/metrics"))
	require.Equal(t, 200, get("/ui/"))
	// A dashboard action is traced to its token too.
	req, _ := http.NewRequest("POST", p.URL+"/ui/api/pause", strings.NewReader(`{"topic":"mail"}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("X-Wheelq-Dashboard", "1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	want := []struct {
		method, path, route string
		status              float64
		token               string
	}{
		{"POST", "/v1/jobs/mail", "POST /v1/jobs/{topic}", 201, "ops"},
		{"GET", "/nope", "-", 404, "-"},
		{"GET", "/v1/counts", "GET /v1/counts", 401, "-"},
		{"GET", "/metrics", "GET /metrics", 200, "ops"},
		{"GET", "/ui/", "/ui/", 200, "ops"},
		{"POST", "/ui/api/pause", "/ui/", 200, "ops"},
	}
	// A line is written once its reply is out: wait for each.
	var got []map[string]any
	waitFor(t, func() bool {
		got = lines(p.Log())
		for _, w := range want {
			if !slices.ContainsFunc(got, func(g map[string]any) bool { return g["method"] == w.method && g["path"] == w.path }) {
				return false
			}
		}
		return true
	})
	for _, w := range want {
		found := false
		for _, g := range got {
			if g["method"] == w.method && g["path"] == w.path {
				found = true
				require.Equal(t, w.route, g["route"], "%v", g)
				require.Equal(t, w.status, g["status"], "%v", g)
				require.Equal(t, w.token, g["token"], "%v", g)
				require.Contains(t, g, "dur")
				require.Contains(t, g, "remote")
				if w.status == 200 {
					require.Greater(t, g["bytes"], float64(0), "%v", g)
				}
			}
		}
		require.True(t, found, "no access line for %s %s in %v", w.method, w.path, got)
	}

	q := startServer(t, nil, append(args, "-set", "log.access=false")...)
	require.Equal(t, 201, call(t, "POST", q.URL+"/v1/jobs/mail", tok, map[string]any{"id": "a2", "payload": "x", "delay_ms": 60000}, nil))
	require.Equal(t, 404, call(t, "GET", q.URL+"/nope", tok, nil, nil))
	require.Empty(t, lines(q.Log()), "log.access = false writes none")
}

// writeFile writes content to a file named name in a temporary directory
// and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}
