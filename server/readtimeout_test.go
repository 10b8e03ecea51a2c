package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

// readTimeoutCase is a read sent while Redis holds every command; code is
// the error code its answer had.
type readTimeoutCase struct {
	name    string
	status  int
	code    string
	retry   string
	elapsed time.Duration
}

// TestServerReadTimeoutIsUnavailable: a read (a job, a list, counts, dead
// jobs, recurring schedules; over HTTP and RESP) that gets no answer from
// Redis within the request's timeout (10 s) changed nothing: it answers
// 503 unavailable with Retry-After (RESP: -UNAVAILABLE), never 504
// outcome_unknown (-OUTCOMEUNKNOWN: "may have been applied"), which only a
// write can be. Redis holds every command for longer than
// that (CLIENT PAUSE), and the server's Redis client waits past it
// (read_timeout=30s, as an operator may set), so the reads' own deadline
// is what passes.
func TestServerReadTimeoutIsUnavailable(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rs.RequireReal(t)
	p := startServer(t, nil, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs)+"?read_timeout=30s", "-pull", "sms", "-set", "log.access=false",
		"-set", "resp.addr=127.0.0.1:0")
	rc := redis.NewClient(&redis.Options{Addr: respAddr(t, p), Protocol: 2, ReadTimeout: time.Minute, PoolSize: 4})
	defer rc.Close()
	require.NoError(t, rc.Ping(context.Background()).Err())
	admin := rs.NewClient()
	defer admin.Close()
	ctx := context.Background()
	// Longer than the requests' 10 s timeout; the reads sent at once.
	require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", 12000, "ALL").Err())
	paused := time.Now()
	reads := map[string]string{
		"get job": "/v1/jobs/sms/nope", "list": "/v1/jobs?topic=sms", "dead": "/v1/dead",
		"counts": "/v1/counts", "recurring": "/v1/recurring",
	}
	var mu sync.Mutex
	var got []readTimeoutCase
	var wg sync.WaitGroup
	for name, path := range reads {
		wg.Go(func() {
			start := time.Now()
			resp, err := http.Get(p.URL + path)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct{ Error struct{ Code string } }
			_ = json.Unmarshal(b, &e)
			mu.Lock()
			got = append(got, readTimeoutCase{name, resp.StatusCode, e.Error.Code, resp.Header.Get("Retry-After"), time.Since(start)})
			mu.Unlock()
		})
	}
	for name, cmd := range map[string][]any{"WQ.GET": {"WQ.GET", "sms", "nope"}, "WQ.COUNTS": {"WQ.COUNTS"}, "WQ.RECURS": {"WQ.RECURS"}} {
		wg.Go(func() {
			start := time.Now()
			err := rc.Do(ctx, cmd...).Err()
			c := readTimeoutCase{name: name, elapsed: time.Since(start), code: fmt.Sprint(err)}
			c.code, _, _ = strings.Cut(c.code, " ")
			if c.code == "UNAVAILABLE" {
				c.status, c.code, c.retry = http.StatusServiceUnavailable, "unavailable", "1" // as HTTP says it
			}
			mu.Lock()
			got = append(got, c)
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Len(t, got, len(reads)+3)
	for _, c := range got {
		t.Logf("%s: %d %s after %v", c.name, c.status, c.code, c.elapsed.Round(time.Millisecond))
	}
	for _, c := range got {
		if c.elapsed < 5*time.Second {
			// Sent after the pause ended (a very busy machine): not the
			// case under test.
			require.Less(t, time.Since(paused), 12*time.Second+c.elapsed, "%s answered at once during the pause", c.name)
			continue
		}
		require.Equal(t, "unavailable", c.code, "%s: %d %s after %v", c.name, c.status, c.code, c.elapsed)
		require.Equal(t, http.StatusServiceUnavailable, c.status, c.name)
		require.Equal(t, "1", c.retry, c.name)
	}
}
