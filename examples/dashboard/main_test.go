package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

func TestDashboard(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	var out lockedBuffer
	exited := make(chan error, 1)
	go func() {
		exited <- run(ctx, srv.Client(t), l, map[string]string{"viewer": "v-pass", "operator": "o-pass"}, &out)
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "dashboard at") }, 20*time.Second, 10*time.Millisecond)
	base := "http://" + l.Addr().String()

	get := func(path, user, pass string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, body := get("/", "", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "your application's own handlers")
	code, _ = get("/wheelq/", "", "")
	require.Equal(t, http.StatusUnauthorized, code, "behind the application's authentication")
	code, _ = get("/wheelq/", "viewer", "wrong")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body = get("/wheelq/", "viewer", "v-pass")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "<title>shop jobs</title>")
	require.Eventually(t, func() bool {
		_, body := get("/wheelq/api/overview", "viewer", "v-pass")
		var o struct{ Stats map[string]int64 }
		return json.Unmarshal([]byte(body), &o) == nil && o.Stats["dead"] == 3
	}, 20*time.Second, 20*time.Millisecond, "the three webhooks dead-lettered")

	requeue := func(user, pass string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, base+"/wheelq/api/requeue", strings.NewReader(`{"topic":"webhook","id":"evt-0"}`))
		require.NoError(t, err)
		req.SetBasicAuth(user, pass)
		req.Header.Set("X-Wheelq-Dashboard", "1")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, body = requeue("viewer", "v-pass")
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "only an operator may requeue jobs")
	code, body = requeue("operator", "o-pass")
	require.Equal(t, http.StatusOK, code, body)

	stop()
	require.NoError(t, <-exited)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
