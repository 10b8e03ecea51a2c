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
		workload{"server-schedule", "jobs/s scheduled through wheelq-server over HTTP with keep-alive from 32 client connections, one job per request and batches of 100, vs the library's Schedule from 32 goroutines in the same run; the server's CPU per job", runServerSchedule},
		workload{"server-push", "2,000 then 20,000 jobs due over [1s, 3s] (1,000 then 10,000 a second) of a topic wheelq-server POSTs to a receiver in the bench process (lateness: the POST's arrival minus due), vs precision64's handlers in the same run", runServerPush},
		workload{"server-reserve", "20,000 jobs due over [1s, 3s], 8 HTTP clients blocked in POST /v1/reserve (lateness: the reply's arrival minus due), again beside 1,000 idle long polls, and 8 clients reading POST /v1/reserve/stream; vs the in-process pull workload in the same run", runServerReserve},
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
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	resp, err := c.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
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
// baseline of the server's workloads. It emits the result and returns
// the jobs/s.
func libraryRate(ctx context.Context, br *benchRedis, workload string, n, goroutines int, payload []byte, emit func(result)) (float64, error) {
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
	emit(result{"workload": workload, "system": "library Schedule", "n": n, "goroutines": goroutines, "jobs_per_s": round(lib), "errors": failed.Load()})
	return lib, nil
}

// runServerSchedule: the library's Schedule from 32 goroutines (the
// baseline), then 32 HTTP connections scheduling one job per request,
// then batches of 100; each its own namespace on one Redis.
func runServerSchedule(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(40_000, 4_000)
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	payload := bytes.Repeat([]byte("x"), 64)
	const conns = 32

	lib, err := libraryRate(ctx, br, "server-schedule", n, conns, payload, emit)
	if err != nil {
		return err
	}
	var next, failed atomic.Int64
	var wg sync.WaitGroup

	ns := namespace("srv")
	s, err := startWheelqServer(ctx, cfg, br.srv.Addr, "-namespace", ns)
	if err != nil {
		return err
	}
	defer s.stop()
	c := httpClient(conns)
	for _, batch := range []int{1, 100} {
		next.Store(0)
		failed.Store(0)
		reqs := n / batch
		cpu0 := s.cpu()
		t0 := time.Now()
		for range conns {
			wg.Go(func() {
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
		emit(rateResult(result{"workload": "server-schedule", "system": "wheelq-server HTTP", "connections": conns, "batch": batch},
			reqs*batch, time.Since(t0), lib, s.cpu()-cpu0, failed.Load()))
	}
	return nil
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
	s, err := startWheelqServer(ctx, cfg, br.srv.Addr, "-namespace", ns, "-pull", "p,idle", "-set", "http.max_polls_per_token=2000")
	if err != nil {
		return err
	}
	defer s.stop()
	for _, pass := range []struct {
		stream bool
		idle   int
	}{{false, 0}, {false, 1000}, {true, 0}} {
		idle := pass.idle
		stopIdle := holdIdlePolls(ctx, s.url, idle)
		time.Sleep(time.Duration(idle) * time.Millisecond) // let them open
		rss := s.rss()
		cpu0 := s.cpu()
		q, err := wheelq.New(br.rdb, wheelq.Config{Namespace: ns})
		if err != nil {
			stopIdle()
			return err
		}
		lat := newLateness(n)
		wanted := make([]time.Time, n)
		cctx, stop := context.WithCancel(ctx)
		var cw, acks sync.WaitGroup
		var ackFailed atomic.Int64
		prefix := fmt.Sprint("i", idle, pass.stream, "-")
		record := func(id string, at time.Time) {
			if i, err := strconv.Atoi(strings.TrimPrefix(id, prefix)); err == nil && i >= 0 && i < n {
				lat.record(i, wanted[i], at)
			}
		}
		for range 8 {
			if pass.stream {
				cw.Go(func() { streamConsumer(cctx, s.url, record, &ackFailed) })
				continue
			}
			// Each client: its own connection for reserve, another for
			// its acks, one batch ack per reply, sent in the background
			// while it is back in reserve.
			rc, ac := httpClient(1), httpClient(1)
			cw.Go(func() {
				for cctx.Err() == nil {
					var out struct {
						Jobs []struct{ Topic, ID, Token string }
					}
					err := post(rc, s.url+"/v1/reserve", map[string]any{"topics": []string{"p"}, "max": 100, "wait_ms": 2000}, &out)
					at := time.Now()
					if err != nil {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					for _, j := range out.Jobs {
						record(j.ID, at)
					}
					if len(out.Jobs) > 0 {
						acks.Go(func() {
							var res struct{ Failed int64 }
							if err := post(ac, s.url+"/v1/ack", map[string]any{"receipts": out.Jobs}, &res); err != nil {
								ackFailed.Add(int64(len(out.Jobs)))
							}
							ackFailed.Add(res.Failed)
						})
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
		acks.Wait()
		stopIdle()
		system := "wheelq-server HTTP reserve (long polls)"
		if pass.stream {
			system = "wheelq-server HTTP reserve/stream"
		}
		r := lat.result("server-reserve", system, n)
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

// streamConsumer reads a reserve stream until ctx ends (opening another
// when one ends), calling record with each job's id and arrival, and acks
// what it got in batches on a connection of its own.
func streamConsumer(ctx context.Context, url string, record func(string, time.Time), ackFailed *atomic.Int64) {
	type receipt struct{ Topic, ID, Token string }
	got := make(chan receipt, 1000)
	ac := httpClient(1)
	var acks sync.WaitGroup
	acks.Go(func() {
		for r := range got {
			batch := []receipt{r}
			for len(batch) < 100 {
				select {
				case r, ok := <-got:
					if !ok {
						break
					}
					batch = append(batch, r)
					continue
				default:
				}
				break
			}
			var res struct{ Failed int64 }
			if err := post(ac, url+"/v1/ack", map[string]any{"receipts": batch}, &res); err != nil {
				ackFailed.Add(int64(len(batch)))
			}
			ackFailed.Add(res.Failed)
		}
	})
	defer func() { close(got); acks.Wait() }()
	c := httpClient(1)
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/reserve/stream",
			strings.NewReader(`{"topics":["p"],"max":100,"wait_ms":60000}`))
		resp, err := c.Do(req)
		if err != nil {
			continue
		}
		dec := json.NewDecoder(resp.Body)
		for {
			var j receipt
			if dec.Decode(&j) != nil {
				break
			}
			record(j.ID, time.Now())
			got <- j
		}
		resp.Body.Close()
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
	s, err := startWheelqServer(ctx, cfg, br.srv.Addr, "-config", conf, "-namespace", ns)
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
