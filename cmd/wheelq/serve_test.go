package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/redistest"
)

func TestServe(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	q, err := wheelq.New(srv.Client(t), wheelq.Config{Namespace: "cli", Partitions: 4})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(ctx) })
	_, err = q.Schedule(ctx, "orders", []byte("x"), wheelq.ID("o-1"), wheelq.After(time.Hour))
	require.NoError(t, err)

	// Refused before listening: bad flags, or actions open to other hosts.
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"serve", "-addr", "0.0.0.0:0"}, "add -read-only"},
		{[]string{"serve", "-addr", "nowhere"}, "bad -addr"},
		{[]string{"serve", "-refresh", "-1s"}, "-refresh -1s < 0"},
		{[]string{"serve", "extra"}, "usage: wheelq serve"},
	} {
		code, _, errs := wq(t, srv, c.args...)
		require.Equal(t, 2, code, c.args)
		require.Contains(t, errs, c.msg, c.args)
	}

	sctx, stop := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	var errb lockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- run(sctx, []string{"-url", "redis://" + srv.Addr, "-namespace", "cli", "serve", "-addr", "127.0.0.1:0", "-read-only"}, pw, &errb)
		_ = pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("serve printed no address: %v; exit %d; stderr: %s", err, <-exited, errb.String())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	require.Contains(t, line, "(read-only)")
	url := strings.Fields(line)[3]
	require.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), line)

	res, err := http.Get(url)
	require.NoError(t, err)
	page, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(page), "<title>wheelq</title>")

	res, err = http.Get(url + "api/overview")
	require.NoError(t, err)
	var o struct {
		ReadOnly bool             `json:"readOnly"`
		Stats    map[string]int64 `json:"stats"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&o))
	_ = res.Body.Close()
	require.True(t, o.ReadOnly)
	require.EqualValues(t, 1, o.Stats["pending"])

	req, err := http.NewRequest(http.MethodPost, url+"api/cancel", strings.NewReader(`{"topic":"orders","id":"o-1"}`))
	require.NoError(t, err)
	req.Header.Set("X-Wheelq-Dashboard", "1")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusForbidden, res.StatusCode, "read-only")
	_, err = q.Lookup(ctx, "orders", "o-1")
	require.NoError(t, err, "still there")

	stop()
	require.Zero(t, <-exited, errb.String())
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader in two
// goroutines.
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
