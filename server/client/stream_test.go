package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/server"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/client"
	"github.com/wheelq/wheelq/server/config"
)

// ctlServer is a server a test can reload and stop mid-test.
type ctlServer struct {
	base string
	srv  *server.Server
	stop func() error // idempotent; also run at the test's end
}

// startCtlServer is startServer (servertest.Start) with the server at
// hand: the tests of a reload or of a stop mid-stream need it.
func startCtlServer(t *testing.T, edit func(*config.Config)) *ctlServer {
	t.Helper()
	rs := redistest.Start(t, redistest.Options{})
	cfg := config.Default()
	cfg.Redis.URL = config.Secret("redis://" + rs.Addr + "/0")
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.Log.Access = false
	cfg.Queue.Pull = []string{"work"}
	if edit != nil {
		edit(&cfg)
	}
	addr := make(chan string, 1)
	s, err := server.New(cfg, server.Options{Listening: func(a string) { addr <- a }})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() { require.NoError(t, stop()) })
	select {
	case a := <-addr:
		<-s.Queue().Ready()
		return &ctlServer{base: "http://" + a, srv: s, stop: stop}
	case err := <-done:
		t.Fatalf("server stopped: %v", err)
		return nil
	}
}

// arrival is a job as fn got it, and when.
type arrival struct {
	r  client.Reservation
	at time.Time
}

// Jobs that come due during the stream are handed over one by one, in
// due order, as they come due: each before the stream's wait ends (which
// a long poll answering at its wait's end would not do), never before its
// due time; a job scheduled from fn arrives too. The
// http.Client's Timeout (1 s) does not cut the stream (5 s). Then the
// wait ends: nil.
func TestReserveStreamArrivals(t *testing.T) {
	base := startServer(t, "work")
	c := client.New(base, "")
	c.HTTP = &http.Client{Timeout: time.Second}
	ctx := context.Background()
	now := time.Now()
	for i, d := range []time.Duration{300, 600, 900} {
		_, err := c.Schedule(ctx, "work", []byte(fmt.Sprint("p", i)), client.Schedule{ID: fmt.Sprint("j", i), At: now.Add(d * time.Millisecond)})
		require.NoError(t, err)
	}
	const wait = 5 * time.Second
	var got []arrival
	start := time.Now()
	err := c.ReserveStream(ctx, client.Reserve{Topics: []string{"work"}, Wait: wait, TTR: time.Minute}, func(r client.Reservation) error {
		got = append(got, arrival{r, time.Now()})
		if r.ID == "j0" {
			// Due after the others: it comes last.
			_, err := c.Schedule(ctx, "work", []byte("p3"), client.Schedule{ID: "j3", Delay: time.Second})
			require.NoError(t, err)
		}
		return c.Ack(ctx, &r)
	})
	took := time.Since(start)
	require.NoError(t, err)
	require.GreaterOrEqual(t, took, wait-200*time.Millisecond, "the stream lasts its wait")
	require.Less(t, took, wait+5*time.Second)
	require.Len(t, got, 4, "every job, over streams of Max 0 (1) each")
	for i, a := range got {
		require.Equal(t, fmt.Sprint("j", i), a.r.ID, "in due order")
		require.Equal(t, fmt.Sprint("p", i), string(a.r.Bytes()))
		require.Equal(t, 1, a.r.Attempt)
		require.False(t, a.at.Before(a.r.Due), "%s handed over before its due time", a.r.ID)
		require.True(t, a.at.Before(start.Add(wait-time.Second)), "%s came due at %v, handed over at %v: not as it came due",
			a.r.ID, a.r.Due.Sub(start), a.at.Sub(start))
	}
	require.Equal(t, time.Second, c.HTTP.Timeout, "the user's client is left as it is")
}

// While fn works on a job, no more than Max jobs are reserved for the
// stream (the server ends a stream at Max, and the client opens the next
// for what is left of the wait), however many are ready: before, the
// server reserved every ready job into the connection's buffers, their
// TTR running. Every job still comes, then the wait ends: nil.
func TestReserveStreamHoldsMax(t *testing.T) {
	base := startServer(t, "work")
	c := client.New(base, "") // schedules, looks, acks
	tr := &countingTransport{rt: http.DefaultTransport}
	sc := client.New(base, "") // streams only
	sc.HTTP = &http.Client{Transport: tr}
	ctx := context.Background()
	const ready = 6
	for i := range ready {
		_, err := c.Schedule(ctx, "work", nil, client.Schedule{ID: fmt.Sprint("m", i)})
		require.NoError(t, err)
	}
	reserved := func() int {
		n := 0
		for i := range ready {
			j, err := c.Get(ctx, "work", fmt.Sprint("m", i))
			require.NoError(t, err)
			if j.Reserved {
				n++
			}
		}
		return n
	}
	var got []string
	held := -1
	const wait = 3 * time.Second
	start := time.Now()
	err := sc.ReserveStream(ctx, client.Reserve{Topics: []string{"work"}, Max: 2, Wait: wait, TTR: time.Minute}, func(r client.Reservation) error {
		if len(got) == 0 {
			time.Sleep(300 * time.Millisecond) // slow work: what comes meanwhile waits
			held = reserved()
		}
		got = append(got, r.ID)
		return c.Ack(ctx, &r)
	})
	require.NoError(t, err)
	require.Equal(t, 2, held, "the job in fn and the one written behind it: Max")
	require.Len(t, got, ready, "every job")
	require.GreaterOrEqual(t, time.Since(start), wait-200*time.Millisecond, "the wait is ReserveStream's, over its streams")
	require.GreaterOrEqual(t, int(tr.n.Load()), ready/2, "a stream per Max jobs")
}

// A stream whose wait passes with nothing due ends with nil and no job;
// with a wait of 0 it hands over the jobs due now, up to Max (0: 1), and
// ends at once.
func TestReserveStreamNothingDue(t *testing.T) {
	base := startServer(t, "work")
	c := client.New(base, "")
	ctx := context.Background()
	called := 0
	count := func(client.Reservation) error { called++; return nil }
	start := time.Now()
	require.NoError(t, c.ReserveStream(ctx, client.Reserve{Topics: []string{"work"}, Wait: time.Second}, count))
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond)
	require.Zero(t, called)

	for i := range 3 {
		_, err := c.Schedule(ctx, "work", nil, client.Schedule{ID: fmt.Sprint("r", i)})
		require.NoError(t, err)
	}
	// Jobs due now are ready within moments: each stream of Max 0 hands
	// over one at most, and one of Max 10 the rest.
	ready := client.Reserve{Topics: []string{"work"}}
	deadline := time.Now().Add(10 * time.Second)
	for called == 0 && time.Now().Before(deadline) {
		start = time.Now()
		require.NoError(t, c.ReserveStream(ctx, ready, count))
		require.Less(t, time.Since(start), 5*time.Second, "a wait of 0 does not wait")
		require.LessOrEqual(t, called, 1, "Max 0 is 1")
	}
	require.Equal(t, 1, called)
	ready.Max = 10
	require.NoError(t, c.ReserveStream(ctx, ready, count))
	require.Equal(t, 3, called, "the rest, ready by now, in one stream")
	start = time.Now()
	require.NoError(t, c.ReserveStream(ctx, ready, count))
	require.Equal(t, 3, called)
	require.Less(t, time.Since(start), 5*time.Second, "a wait of 0 does not wait")
}

// fn's error ends the stream and is returned as it is. The job fn got is
// the caller's (still reserved, its token good); the connection is
// closed, so a job that comes due after that is not held by the stream
// that is gone: a Reserve gets it, first attempt, long before the TTR
// (a minute) a lost job would wait.
func TestReserveStreamFnError(t *testing.T) {
	base := startServer(t, "work")
	c := client.New(base, "")
	ctx := context.Background()
	_, err := c.Schedule(ctx, "work", nil, client.Schedule{ID: "a"})
	require.NoError(t, err)
	_, err = c.Schedule(ctx, "work", nil, client.Schedule{ID: "b", Delay: 500 * time.Millisecond})
	require.NoError(t, err)
	errStop := errors.New("stop")
	var mine []client.Reservation
	start := time.Now()
	err = c.ReserveStream(ctx, client.Reserve{Topics: []string{"work"}, Wait: 20 * time.Second, TTR: time.Minute}, func(r client.Reservation) error {
		mine = append(mine, r)
		return errStop
	})
	require.Equal(t, errStop, err, "fn's error as it is")
	require.Less(t, time.Since(start), 5*time.Second)
	require.Len(t, mine, 1)
	require.Equal(t, "a", mine[0].ID)

	rs, err := c.Reserve(ctx, client.Reserve{Topics: []string{"work"}, Wait: 10 * time.Second})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, "b", rs[0].ID)
	require.Equal(t, 1, rs[0].Attempt, "handed out once")
	require.Less(t, time.Since(start), 15*time.Second, "not after a TTR")
	j, err := c.Get(ctx, "work", "a")
	require.NoError(t, err)
	require.True(t, j.Reserved, "the job fn got stays the caller's")
	require.NoError(t, c.Ack(ctx, &mine[0]))
	require.NoError(t, c.Ack(ctx, &rs[0]))
}

// ctx's end ends the stream promptly, with ctx's error, and fn is not
// called after it, even for a job already received. A deadline of the
// caller is its own, not the client's Timeout + wait.
func TestReserveStreamContext(t *testing.T) {
	base := startServer(t, "work")
	c := client.New(base, "")
	c.HTTP = &http.Client{Timeout: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	err := c.ReserveStream(ctx, client.Reserve{Topics: []string{"work"}, Wait: 30 * time.Second}, func(client.Reservation) error {
		return errors.New("no job was due")
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 5*time.Second)

	dctx, dcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer dcancel()
	err = c.ReserveStream(dctx, client.Reserve{Topics: []string{"work"}, Wait: 30 * time.Second}, func(client.Reservation) error { return nil })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotContains(t, err.Error(), "the client's Timeout")

	// Two jobs reserved at once come in one write; fn ends ctx at the
	// first and is not given the second.
	bg := context.Background()
	for _, id := range []string{"x", "y"} {
		_, err := c.Schedule(bg, "work", nil, client.Schedule{ID: id})
		require.NoError(t, err)
	}
	ctx2, cancel2 := context.WithCancelCause(bg)
	defer cancel2(nil)
	errQuit := errors.New("quitting")
	n := 0
	err = c.ReserveStream(ctx2, client.Reserve{Topics: []string{"work"}, Max: 2, Wait: 10 * time.Second}, func(client.Reservation) error {
		n++
		cancel2(errQuit)
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, errQuit, "the cause is kept")
	require.Equal(t, 1, n)
}

// The server's error, as the stream's last line, is the error Reserve
// gives for its code: a paused topic's (paused) ends the stream after its
// 200; a topic not pulled is refused (topic_mode).
func TestReserveStreamServerError(t *testing.T) {
	base := startServer(t, "work")
	c := client.New(base, "")
	ctx := context.Background()
	resp, err := http.Post(base+"/v1/topics/work/pause", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)

	// As the server says it: a 200, then a line.
	resp, err = http.Post(base+"/v1/reserve/stream", "application/json", strings.NewReader(`{"topics":["work"],"wait_ms":1000}`))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(b), `{"error":{"code":"paused"`)

	called := false
	err = c.ReserveStream(ctx, client.Reserve{Topics: []string{"work"}, Wait: 5 * time.Second}, func(client.Reservation) error { called = true; return nil })
	require.ErrorIs(t, err, client.ErrPaused)
	require.False(t, called)

	err = c.ReserveStream(ctx, client.Reserve{Topics: []string{"other"}, Wait: time.Second}, func(client.Reservation) error { return nil })
	require.ErrorIs(t, err, client.ErrTopicMode)
	err = c.ReserveStream(ctx, client.Reserve{Wait: time.Second}, func(client.Reservation) error { return nil })
	require.ErrorIs(t, err, client.ErrInvalid, "no topics")
}

// A token revoked mid-stream (the token file reloaded without it) ends
// the stream with the server's last line, unauthorized: ErrUnauthorized,
// after the jobs it had handed over.
func TestReserveStreamRevoked(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	tok, sha, err := auth.Generate("worker")
	require.NoError(t, err)
	_, otherSHA, err := auth.Generate("other")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, []byte("worker "+sha+" produce=work consume=work\n"), 0o600))
	s := startCtlServer(t, func(cfg *config.Config) {
		cfg.TokenFile = file
		cfg.Tokens = []config.Token{{ID: "other", SHA256: otherSHA, Admin: []string{"*"}}}
	})
	c := client.New(s.base, tok)
	ctx := context.Background()
	_, err = c.Schedule(ctx, "work", nil, client.Schedule{ID: "first"})
	require.NoError(t, err)
	var got []string
	err = c.ReserveStream(ctx, client.Reserve{Topics: []string{"work"}, Wait: 20 * time.Second}, func(r client.Reservation) error {
		got = append(got, r.ID)
		require.NoError(t, c.Ack(ctx, &r))
		require.NoError(t, os.WriteFile(file, []byte("# worker revoked\n"), 0o600))
		require.NoError(t, s.srv.Reload())
		return nil
	})
	require.ErrorIs(t, err, client.ErrUnauthorized)
	require.Equal(t, []string{"first"}, got)
}

// A server that stops ends its open streams at once: nil, as at the
// wait's end (a stream that ends is no error); the next call finds the
// server gone: ErrUnavailable.
func TestReserveStreamServerStops(t *testing.T) {
	s := startCtlServer(t, nil)
	c := client.New(s.base, "")
	ctx := context.Background()
	stopped := make(chan error, 1)
	stopper := time.AfterFunc(500*time.Millisecond, func() { stopped <- s.stop() })
	defer stopper.Stop()
	start := time.Now()
	err := c.ReserveStream(ctx, client.Reserve{Topics: []string{"work"}, Wait: 30 * time.Second}, func(client.Reservation) error { return nil })
	require.NoError(t, err)
	require.Less(t, time.Since(start), 15*time.Second, "not at the wait's end")
	require.NoError(t, <-stopped)
	err = c.ReserveStream(ctx, client.Reserve{Topics: []string{"work"}, Wait: time.Second}, func(client.Reservation) error { return nil })
	require.ErrorIs(t, err, client.ErrUnavailable)
}
