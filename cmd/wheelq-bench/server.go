package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wheelq/wheelq"
)

func init() {
	workloads = append(workloads,
		workload{"server-schedule", "jobs/s scheduled through wheelq-server over HTTP with keep-alive from 32 client connections, one job per request (net/http's client, then a lean one) and batches of 100, vs the library's Schedule from 32 goroutines before and after them; the server's CPU per job", runServerSchedule},
		workload{"server-push", "2,000 then 20,000 jobs due over [1s, 3s] (1,000 then 10,000 a second) of a topic wheelq-server POSTs to a receiver in the bench process (lateness: the POST's arrival minus due), vs precision64's handlers in the same run", runServerPush},
		workload{"server-reserve", "20,000 jobs due over [1s, 3s], 8 HTTP clients blocked in POST /v1/reserve (lateness: the reply's arrival minus due), with Go's client then a lean one, again beside 1,000 idle long polls, and 8 clients reading POST /v1/reserve/stream (Go's client, then a lean one); the server's CPU, garbage and GC cycles; vs the in-process pull workload in the same run", runServerReserve},
	)
}

// wheelqServer is a wheelq-server process of a workload.
type wheelqServer struct {
	cmd  *exec.Cmd
	url  string
	resp string // the RESP front end's address, if started with one
	done chan struct{}
}

var (
	serverListening = regexp.MustCompile(`wheelq server: listening" addr=(http://[0-9.:]+)`)
	respListening   = regexp.MustCompile(`wheelq server: RESP listening" addr=([0-9.:]+)`)
)

// startWheelqServer builds (once) and starts wheelq-server on addr's
// Redis with args.
func startWheelqServer(ctx context.Context, cfg *config, redisAddr string, args ...string) (*wheelqServer, error) {
	bin := cfg.serverBin
	if bin == "" {
		dir, err := os.MkdirTemp("", "wheelq-bench-server")
		if err != nil {
			return nil, err
		}
		bin = filepath.Join(dir, "wheelq-server")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/wheelq-server")
		build.Dir = "server"
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build wheelq-server (run from the repository's root, or pass -server-bin): %v\n%s", err, out)
		}
		cfg.serverBin = bin // built once per run
	}
	all := append([]string{"-addr", "127.0.0.1:0", "-redis-url", "redis://" + redisAddr + "/0", "-set", "log.access=false"}, args...)
	if cfg.schedSlice != 0 {
		all = append(all, "-set", "process.sched_slice="+cfg.schedSlice.String())
	}
	s := &wheelqServer{cmd: exec.Command(bin, all...), done: make(chan struct{})}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	found, foundRESP := make(chan string, 1), make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := serverListening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
			if m := respListening.FindStringSubmatch(sc.Text()); m != nil {
				foundRESP <- m[1]
			}
		}
		_ = s.cmd.Wait()
	}()
	select {
	case s.url = <-found:
	case <-s.done:
		return nil, errors.New("wheelq-server exited before listening")
	case <-time.After(30 * time.Second):
		s.stop()
		return nil, errors.New("wheelq-server did not listen within 30 s")
	}
	if strings.Contains(strings.Join(args, " "), "resp.addr=") {
		select {
		case s.resp = <-foundRESP:
		case <-time.After(30 * time.Second):
			s.stop()
			return nil, errors.New("wheelq-server's RESP front end did not listen within 30 s")
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if resp, err := http.Get(s.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, errors.New("wheelq-server not ready within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cpu is the server process's user+system CPU seconds so far (Linux).
func (s *wheelqServer) cpu() float64 { return pidCPU(s.cmd.Process.Pid) }

// rss is the server's resident set in bytes (Linux).
func (s *wheelqServer) rss() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func (s *wheelqServer) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// post sends a JSON body and decodes the reply into out (if not nil).
func post(c *http.Client, url string, body, out any) error {
	_, err := postAt(c, url, body, out)
	return err
}

// postAt is post, also returning when the reply's head arrived (before
// its body is read and decoded): a long poll's delivery time.
func postAt(c *http.Client, url string, body, out any) (time.Time, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return time.Time{}, err
	}
	resp, err := c.Post(url, "application/json", bytes.NewReader(b))
	at := time.Now()
	if err != nil {
		return at, err
	}
	return at, readReply(resp, out)
}

// readReply reads resp's body into out (unless nil), or returns its
// status and body as an error.
func readReply(resp *http.Response, out any) error {
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s: %s", resp.Status, rb)
	}
	if out != nil {
		return json.Unmarshal(rb, out)
	}
	return nil
}

func httpClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}
}

// libraryRate schedules n jobs (payload, due in an hour) with the
// library's Schedule from goroutines, on a namespace of their own: the
// baseline of the server's workloads. It emits the result (labelled
// with pass) and returns the jobs/s.
func libraryRate(ctx context.Context, br *benchRedis, workload, pass string, n, goroutines int, payload []byte, emit func(result)) (float64, error) {
	q, err := wheelq.New(br.rdb, wheelq.Config{Namespace: namespace("lib")})
	if err != nil {
		return 0, err
	}
	defer func() { _ = q.Shutdown(ctx) }()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range goroutines {
		wg.Go(func() {
			for k := next.Add(1) - 1; k < int64(n); k = next.Add(1) - 1 {
				if _, err := q.Schedule(ctx, "t", payload, wheelq.ID(fmt.Sprint("j", k)), wheelq.After(time.Hour)); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	lib := float64(n) / time.Since(t0).Seconds()
	emit(result{"workload": workload, "system": "library Schedule", "pass": pass, "n": n, "goroutines": goroutines, "jobs_per_s": round(lib), "errors": failed.Load()})
	return lib, nil
}

// rateRun is one measured pass of a front end, emitted once the
// baseline is known.
type rateRun struct {
	r      result
	n      int
	took   time.Duration
	cpu    float64
	failed int64
}

// withLibraryBaseline runs a front end's passes between two passes of
// the library's Schedule (after a warm-up pass, reported and not used)
// and emits each run with its ratio to their mean: neither a cold first
// pass nor a machine that got busier halfway favours one side.
func withLibraryBaseline(ctx context.Context, br *benchRedis, workload string, n, goroutines int, payload []byte, emit func(result), passes func() ([]rateRun, error)) error {
	if _, err := libraryRate(ctx, br, workload, "warm-up (not used)", n, goroutines, payload, emit); err != nil {
		return err
	}
	before, err := libraryRate(ctx, br, workload, "before", n, goroutines, payload, emit)
	if err != nil {
		return err
	}
	runs, err := passes()
	if err != nil {
		return err
	}
	after, err := libraryRate(ctx, br, workload, "after", n, goroutines, payload, emit)
	if err != nil {
		return err
	}
	lib := (before + after) / 2
	for _, run := range runs {
		run.r["library_jobs_per_s"] = round(lib)
		emit(rateResult(run.r, run.n, run.took, lib, run.cpu, run.failed))
	}
	return nil
}

// runServerSchedule: 32 HTTP connections scheduling one job per request
// (Go's net/http client, then a lean one: leanSchedule), then batches of
// 100, between passes of the library's Schedule from 32 goroutines (the
// baseline: withLibraryBaseline); each its own namespace on one Redis.
func runServerSchedule(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(40_000, 4_000)
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	payload := bytes.Repeat([]byte("x"), 64)
	const conns = 32

	ns := namespace("srv")
	s, err := startWheelqServer(ctx, cfg, br.addr(), "-namespace", ns, "-pull", "t")
	if err != nil {
		return err
	}
	defer s.stop()
	return withLibraryBaseline(ctx, br, "server-schedule", n, conns, payload, emit, func() ([]rateRun, error) {
		var runs []rateRun
		var next, failed atomic.Int64
		var wg sync.WaitGroup
		c := httpClient(conns)
		for _, pass := range []struct {
			batch int
			lean  bool
		}{{1, false}, {1, true}, {100, false}} {
			batch := pass.batch
			next.Store(0)
			failed.Store(0)
			reqs := n / batch
			cpu0 := s.cpu()
			t0 := time.Now()
			for ci := range conns {
				wg.Go(func() {
					if pass.lean {
						failed.Add(leanSchedule(s.url, fmt.Sprint("lean", ci, "-"), payload, &next, int64(reqs)))
						return
					}
					for k := next.Add(1) - 1; k < int64(reqs); k = next.Add(1) - 1 {
						var err error
						if batch == 1 {
							err = post(c, s.url+"/v1/jobs/t", map[string]any{"id": fmt.Sprint("b1-", k), "payload": string(payload), "delay_ms": 3600e3}, nil)
						} else {
							jobs := make([]map[string]any, batch)
							for i := range jobs {
								jobs[i] = map[string]any{"topic": "t", "id": fmt.Sprint("b", batch, "-", k, "-", i), "payload": string(payload), "delay_ms": 3600e3}
							}
							var out struct{ Failed int }
							err = post(c, s.url+"/v1/batch", map[string]any{"jobs": jobs}, &out)
							if err == nil && out.Failed > 0 {
								failed.Add(int64(out.Failed))
							}
						}
						if err != nil {
							failed.Add(int64(batch))
						}
					}
				})
			}
			wg.Wait()
			took, cpu := time.Since(t0), s.cpu()-cpu0
			client := "net/http"
			if pass.lean {
				client = "lean (one goroutine per connection, no Transport)"
			}
			runs = append(runs, rateRun{result{"workload": "server-schedule", "system": "wheelq-server HTTP", "client": client, "connections": conns, "batch": batch},
				reqs * batch, took, cpu, failed.Load()})
		}
		return runs, nil
	})
}

// leanSchedule posts one job per request on a keep-alive connection of
// its own until next reaches reqs, and returns how many failed. It writes
// each request itself and reads the reply with http.ReadResponse: no
// Transport, with its two goroutines and their hand-offs per request.
// This is a load generator's shape (wrk's): on 2 shared cores the
// clients' own CPU is otherwise a large share of what the server's
// figure measures, where the library's baseline has no client at all.
func leanSchedule(base, prefix string, payload []byte, next *atomic.Int64, reqs int64) int64 {
	c, err := dialLean(context.Background(), base)
	if err != nil {
		return reqs / 32 // about this connection's share, unsent
	}
	defer c.close()
	var failed int64
	var body []byte
	for k := next.Add(1) - 1; k < reqs; k = next.Add(1) - 1 {
		body = append(body[:0], `{"id":"`...)
		body = append(body, prefix...)
		body = strconv.AppendInt(body, k, 10)
		body = append(body, `","payload":"`...)
		body = append(body, payload...) // ASCII: a JSON string as it is
		body = append(body, `","delay_ms":3600000}`...)
		resp, _, err := c.post("/v1/jobs/t", body)
		if err != nil {
			return failed + 1
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			failed++
		}
	}
	return failed
}

// leanConn is a keep-alive HTTP/1.1 connection written and read without
// Go's Transport (leanSchedule, leanReserver, leanStreamConsumer): post
// writes a request and reads its reply's head with http.ReadResponse, on
// the caller's goroutine.
type leanConn struct {
	host string
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	stop func() bool
}

// dialLean connects to base ("http://host:port"); the connection's reads
// and writes end when ctx does.
func dialLean(ctx context.Context, base string) (*leanConn, error) {
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", host)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	return &leanConn{host: host, conn: conn, r: bufio.NewReader(conn), w: bufio.NewWriter(conn), stop: stop}, nil
}

func (c *leanConn) close() {
	c.stop()
	_ = c.conn.Close()
}

// post sends a JSON body to path and returns the reply (its body not
// read yet) and when its head arrived.
func (c *leanConn) post(path string, body []byte) (*http.Response, time.Time, error) {
	fmt.Fprintf(c.w, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, c.host, len(body))
	_, _ = c.w.Write(body)
	if err := c.w.Flush(); err != nil {
		return nil, time.Time{}, err
	}
	resp, err := http.ReadResponse(c.r, nil)
	return resp, time.Now(), err
}

// runServerReserve: 8 HTTP clients blocked in reserve on a pulled topic,
// n jobs due over [1s, 3s] scheduled by this process; lateness is when a
// reply arrived minus the job's due time. Also measured: server RSS and
// CPU with 1,000 idle long polls held open beside them. Then the
// in-process pull workload, the baseline.
func runServerReserve(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(20_000, 2_000)
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	ns := namespace("srvpull")
	s, err := startWheelqServer(ctx, cfg, br.addr(), "-namespace", ns, "-pull", "p,idle", "-set", "http.max_polls_per_token=2000")
	if err != nil {
		return err
	}
	defer s.stop()
	for _, pass := range []struct {
		stream, lean bool
		idle         int
	}{{false, false, 0}, {false, true, 0}, {false, false, 1000}, {true, false, 0}, {true, true, 0}} {
		idle := pass.idle
		stopIdle := holdIdlePolls(ctx, s.url, idle)
		time.Sleep(time.Duration(idle) * time.Millisecond) // let them open
		rss := s.rss()
		cpu0 := s.cpu()
		m0 := s.goMetrics()
		q, err := wheelq.New(br.rdb, wheelq.Config{Namespace: ns})
		if err != nil {
			stopIdle()
			return err
		}
		lat := newLateness(n)
		wanted := make([]time.Time, n)
		cctx, stop := context.WithCancel(ctx)
		var cw sync.WaitGroup
		var ackFailed atomic.Int64
		prefix := fmt.Sprint("i", idle, pass.stream, pass.lean, "-")
		record := func(id string, at time.Time) {
			if i, err := strconv.Atoi(strings.TrimPrefix(id, prefix)); err == nil && i >= 0 && i < n {
				lat.record(i, wanted[i], at)
			}
		}
		for range 8 {
			if pass.stream && pass.lean {
				cw.Go(func() { leanStreamConsumer(cctx, s.url, record, &ackFailed) })
				continue
			}
			if pass.stream {
				cw.Go(func() { streamConsumer(cctx, s.url, record, &ackFailed) })
				continue
			}
			if pass.lean {
				cw.Go(func() { leanReserver(cctx, s.url, record, &ackFailed) })
				continue
			}
			// Each client: its own connection for reserve, another for
			// its acks (httpAcker), sent in the background while it is
			// back in reserve; a job is delivered when the reply's head
			// arrived.
			rc := httpClient(1)
			cw.Go(func() {
				ack, acked := httpAcker(s.url, &ackFailed)
				defer acked()
				for cctx.Err() == nil {
					var out struct {
						Jobs []receipt
					}
					at, err := postAt(rc, s.url+"/v1/reserve", map[string]any{"topics": []string{"p"}, "max": 100, "wait_ms": 2000}, &out)
					if err != nil {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					for _, j := range out.Jobs {
						record(j.ID, at)
						ack(j)
					}
				}
			})
		}
		t0 := time.Now()
		ds := dues(t0, n, time.Second, 3*time.Second)
		copy(wanted, ds)
		failed := scheduleDue(ctx, q, "p", prefix, ds)
		waitAll(ctx, lat, t0.Add(10*time.Second))
		stop()
		cw.Wait()
		stopIdle()
		system := "wheelq-server HTTP reserve (long polls)"
		switch {
		case pass.stream && pass.lean:
			system = "wheelq-server HTTP reserve/stream, lean client"
		case pass.stream:
			system = "wheelq-server HTTP reserve/stream"
		case pass.lean:
			system = "wheelq-server HTTP reserve (long polls, lean client)"
		}
		m1 := s.goMetrics()
		r := lat.result("server-reserve", system, n)
		r["server_alloc_bytes_per_job"] = round((m1[allocTotal] - m0[allocTotal]) / float64(n))
		r["server_gc_cycles"] = m1[gcCount] - m0[gcCount]
		r["idle_polls"] = idle
		r["server_rss_bytes"] = rss
		r["server_cpu_s"] = round((s.cpu()-cpu0)*10) / 10
		r["schedule_errors"] = failed
		r["ack_errors"] = ackFailed.Load()
		emit(r)
	}
	// The in-process pull figure of the same run, the baseline.
	return runPull(ctx, cfg, emit)
}

// receipt is a reserved job as a consumer acks it.
type receipt struct{ Topic, ID, Token string }

// httpAcker acks receipts over HTTP on a connection of its own, in
// batches: what came while the last POST /v1/ack was out goes in the
// next one (up to 100), as a consumer taking thousands of jobs a second
// would ack. done waits for every ack sent.
func httpAcker(url string, ackFailed *atomic.Int64) (ack func(receipt), done func()) {
	c := httpClient(1)
	return batchAcker(func(batch []receipt) {
		var res struct{ Failed int64 }
		if err := post(c, url+"/v1/ack", map[string]any{"receipts": batch}, &res); err != nil {
			ackFailed.Add(int64(len(batch)))
		}
		ackFailed.Add(res.Failed)
	})
}

// batchAcker runs send, from a goroutine of its own, on batches of the
// receipts given to ack: the first waiting, then whatever else is (up
// to 100). done waits for it to send every receipt given.
func batchAcker(send func([]receipt)) (ack func(receipt), done func()) {
	got := make(chan receipt, 1000)
	var wg sync.WaitGroup
	wg.Go(func() {
		for r := range got {
			batch := []receipt{r}
		more:
			for len(batch) < 100 {
				select {
				case r, ok := <-got:
					if !ok {
						break more
					}
					batch = append(batch, r)
				default:
					break more
				}
			}
			send(batch)
		}
	})
	return func(r receipt) { got <- r }, func() { close(got); wg.Wait() }
}

// readStream reads a reserve stream's lines until it ends, or its last
// line {"error": ...}, calling record with each job's id and arrival and
// handing it to ack.
func readStream(body io.Reader, record func(string, time.Time), ack func(receipt)) {
	dec := json.NewDecoder(body)
	for {
		var j receipt
		if dec.Decode(&j) != nil || j.Token == "" {
			return
		}
		record(j.ID, time.Now())
		ack(j)
	}
}

// streamConsumer reads a reserve stream until ctx ends (opening another
// when one ends), calling record with each job's id and arrival, and acks
// what it got in batches on a connection of its own.
func streamConsumer(ctx context.Context, url string, record func(string, time.Time), ackFailed *atomic.Int64) {
	ack, acked := httpAcker(url, ackFailed)
	defer acked()
	c := httpClient(1)
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/reserve/stream",
			strings.NewReader(`{"topics":["p"],"max":100,"wait_ms":60000}`))
		resp, err := c.Do(req)
		if err != nil {
			continue
		}
		readStream(resp.Body, record, ack)
		resp.Body.Close()
	}
}

// leanStreamConsumer reads POST /v1/reserve/stream as streamConsumer
// does, on a keep-alive connection of its own without Go's Transport (it
// writes the request and reads the chunked reply from the connection
// itself, as leanReserver does), opening another stream when one ends.
func leanStreamConsumer(ctx context.Context, base string, record func(string, time.Time), ackFailed *atomic.Int64) {
	ack, acked := httpAcker(base, ackFailed)
	defer acked()
	c, err := dialLean(ctx, base)
	if err != nil {
		return
	}
	defer c.close()
	body := []byte(`{"topics":["p"],"max":100,"wait_ms":60000}`)
	for ctx.Err() == nil {
		resp, _, err := c.post("/v1/reserve/stream", body)
		if err != nil {
			return
		}
		readStream(resp.Body, record, ack)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return
		}
	}
}

// leanReserver long-polls POST /v1/reserve on a keep-alive connection of
// its own, as leanSchedule posts (no Transport: it writes each request
// and reads the reply with http.ReadResponse), until ctx ends, calling
// record with each job's id and the arrival of its reply's head; its
// acks go as streamConsumer's do. A busy long-polling consumer is back in
// reserve sooner the less its client costs, and on 2 shared cores Go's
// Transport (two goroutines and their hand-offs per request) is a large
// part of that.
func leanReserver(ctx context.Context, base string, record func(string, time.Time), ackFailed *atomic.Int64) {
	ack, acked := httpAcker(base, ackFailed)
	defer acked()
	c, err := dialLean(ctx, base)
	if err != nil {
		return
	}
	defer c.close()
	body := []byte(`{"topics":["p"],"max":100,"wait_ms":2000}`)
	for ctx.Err() == nil {
		resp, at, err := c.post("/v1/reserve", body)
		if err != nil {
			return
		}
		var out struct{ Jobs []receipt }
		err = json.NewDecoder(resp.Body).Decode(&out)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			continue
		}
		for _, j := range out.Jobs {
			record(j.ID, at)
			ack(j)
		}
	}
}

// holdIdlePolls holds k long polls open on a topic nothing is scheduled
// to, until the returned function is called.
func holdIdlePolls(ctx context.Context, url string, k int) func() {
	if k == 0 {
		return func() {}
	}
	cctx, cancel := context.WithCancel(ctx)
	c := httpClient(k)
	var wg sync.WaitGroup
	for range k {
		wg.Go(func() {
			for cctx.Err() == nil {
				req, _ := http.NewRequestWithContext(cctx, "POST", url+"/v1/reserve", strings.NewReader(`{"topics":["idle"],"wait_ms":30000}`))
				resp, err := c.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

// runServerPush: W1 pushed: jobs due over [1s, 3s] of a topic the
// server delivers by HTTP POST to a receiver in this process (204 each),
// n/10 of them (1,000 a second at full size), then n (10,000 a second);
// lateness is the POST's arrival minus the due time.
func runServerPush(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(20_000, 2_000)
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	type pushPass struct {
		n      int
		lat    *lateness
		wanted []time.Time
	}
	var passes []*pushPass
	for _, k := range []int{n / 10, n} {
		passes = append(passes, &pushPass{n: k, lat: newLateness(k), wanted: make([]time.Time, k)})
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	recv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		// Ids are "h<pass>-<index>".
		pass, idx, _ := strings.Cut(strings.TrimPrefix(r.Header.Get("Wheelq-Id"), "h"), "-")
		k, kerr := strconv.Atoi(pass)
		i, ierr := strconv.Atoi(idx)
		if kerr == nil && ierr == nil && k >= 0 && k < len(passes) && i >= 0 && i < passes[k].n {
			passes[k].lat.record(i, passes[k].wanted[i], at)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = recv.Serve(l) }()
	defer recv.Close()
	dir, err := os.MkdirTemp("", "wheelq-bench-push")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	conf := filepath.Join(dir, "wheelq-server.toml")
	body := fmt.Sprintf("[push]\nallow_hosts = [%q]\n[[push.topic]]\ntopic = \"hook\"\nurl = \"http://%s/in\"\nsecret = \"whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\"\n", l.Addr(), l.Addr())
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return err
	}
	ns := namespace("srvpush")
	s, err := startWheelqServer(ctx, cfg, br.addr(), "-config", conf, "-namespace", ns)
	if err != nil {
		return err
	}
	defer s.stop()
	q, err := wheelq.New(br.rdb, wheelq.Config{Namespace: ns})
	if err != nil {
		return err
	}
	for k, p := range passes {
		t0 := time.Now()
		ds := dues(t0, p.n, time.Second, 3*time.Second)
		copy(p.wanted, ds)
		cpu0 := s.cpu()
		failed := scheduleDue(ctx, q, "hook", fmt.Sprintf("h%d-", k), ds)
		waitAll(ctx, p.lat, t0.Add(10*time.Second))
		r := p.lat.result("server-push", "wheelq-server push (POST received)", p.n)
		r["jobs_per_s"] = p.n / 2
		r["schedule_errors"] = failed
		r["server_cpu_us_per_job"] = round((s.cpu() - cpu0) * 1e6 / float64(p.n))
		emit(r)
	}
	return runPrecision64(ctx, cfg, emit)
}

// rateResult adds a scheduling pass's figures to r: n jobs in took, their
// rate and its ratio to the library's (lib jobs/s), the server's CPU
// seconds per job (cpu in all), the failures.
func rateResult(r result, n int, took time.Duration, lib, cpu float64, failed int64) result {
	rate := float64(n) / took.Seconds()
	r["n"], r["jobs_per_s"], r["ratio_to_library"] = n, round(rate), round(rate/lib*100)/100
	r["server_cpu_us_per_job"], r["errors"] = round(cpu*1e6/float64(n)), failed
	return r
}

// scheduleDue schedules a job of topic per due time in ds (64-byte
// payloads, id prefix+index) from 32 goroutines, and returns how many
// failed: W1's writing, for the workloads whose consumer is a server's.
func scheduleDue(ctx context.Context, q *wheelq.Queue, topic, prefix string, ds []time.Time) int64 {
	var wg sync.WaitGroup
	var next, failed atomic.Int64
	payload := bytes.Repeat([]byte("x"), 64)
	for range 32 {
		wg.Go(func() {
			for k := next.Add(1) - 1; k < int64(len(ds)); k = next.Add(1) - 1 {
				if _, err := q.Schedule(ctx, topic, payload, wheelq.ID(fmt.Sprint(prefix, k)), wheelq.At(ds[k])); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return failed.Load()
}

// The server's Go runtime metrics that goMetrics reads.
const (
	allocTotal = "go_memstats_alloc_bytes_total"
	gcCount    = "go_gc_duration_seconds_count"
)

// goMetrics reads allocTotal and gcCount from the server's /metrics.
func (s *wheelqServer) goMetrics() map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && (f[0] == allocTotal || f[0] == gcCount) {
			out[f[0]], _ = strconv.ParseFloat(f[1], 64)
		}
	}
	return out
}
