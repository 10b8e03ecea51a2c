// Command wheelq-bench measures wheelq and prints one JSON object per line,
// one per system per workload, so that runs can be compared by a script.
//
// Usage:
//
//	go run ./cmd/wheelq-bench -workload precision,memory,addcancel
//
// Every object has "workload", "system" and "n", the figures of that
// workload, and the machine ("go", "gomaxprocs", "time"). Workloads that
// need Redis start their own redis-server on a free loopback port unless
// -redis names one (which must be a server you may write to: the workloads
// use their own namespace but flush nothing).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wheelq/wheelq/wheel"
)

type result map[string]any

type workload struct {
	name string
	doc  string
	run  func(ctx context.Context, cfg *config, emit func(result)) error
}

type config struct {
	// serverBin is the wheelq-server binary of the server-* and resp-*
	// workloads (built from ./server when empty).
	serverBin  string
	n          int
	goroutines []int
	claimLead  time.Duration
	history    int // Config.History.Count of the burst queue
	redisAddr  string
	quick      bool
	wakes      time.Duration // precision: report the wheel's sleeper's wakes this late
	backup     bool          // precision: the wheel with SchedulerConfig.Backup
	payload    int           // backlog: each job's payload in bytes
	warm       time.Duration // qprecision, precision64: wait this long after Start before t0
	bandwidth  int           // backlog: cap the worker's link at this many bytes/s
	schedSlice time.Duration // the bench's and the server's time slice (wheel.SetSchedSlice); 0: the kernel's
}

var workloads = []workload{
	{"precision", "lateness of 20,000 timers due over [1s, 3s]: wheel vs time.AfterFunc", runPrecision},
	{"memory", "Go heap bytes per pending entry at 1M entries: wheel vs time.AfterFunc", runMemory},
	{"addcancel", "ns per add+cancel with 1M pending: wheel, scheduler, time.AfterFunc", runAddCancel},
}

func main() {
	if spec := os.Getenv(envTeamChild); spec != "" {
		teamChild(spec) // a worker process of the team workload
		return
	}
	if spec := os.Getenv(envLimitChild); spec != "" {
		limitChild(spec) // a worker process of the limits workload
		return
	}
	if spec := os.Getenv(envRecurChild); spec != "" {
		recurChild(spec) // a worker process of the recurring workload
		return
	}
	var cfg config
	var names string
	flag.StringVar(&names, "workload", "precision,memory,addcancel", "comma-separated workloads, or \"all\"")
	flag.IntVar(&cfg.n, "n", 0, "override the workload's size")
	flag.StringVar(&cfg.redisAddr, "redis", "", "use this Redis (host:port) instead of starting one")
	flag.StringVar(&cfg.serverBin, "server-bin", "", "server-*, resp-*: the wheelq-server binary (default: built from ./server, run from the repository's root)")
	flag.BoolVar(&cfg.quick, "quick", false, "smaller sizes, for a smoke test")
	flag.BoolVar(&cfg.backup, "backup", false, "precision: the wheel with wheel.SchedulerConfig.Backup (a second runner on a thread of its own; Linux, GOMAXPROCS >= 2; not with -wakes)")
	flag.DurationVar(&cfg.wakes, "wakes", 0, "precision: print to stderr each wake of the wheel's sleeper at least this late, with the thread's run-queue wait and the machine's CPU pressure meanwhile (Linux)")
	flag.DurationVar(&cfg.claimLead, "claim-lead", 0, "burst: Config.ClaimLead (0: the default, 5ms)")
	flag.IntVar(&cfg.history, "history", 0, "burst: Config.History.Count (0: the default, 100,000; -1: no run history)")
	flag.DurationVar(&cfg.warm, "warm", 0, "qprecision, precision64: wait this long after the queue started (Ready) before scheduling, so the first job is due warm+1s after Ready (0: at once, the first due 1 s after Ready)")
	flag.IntVar(&cfg.payload, "payload", 1<<20, "backlog: each job's payload in bytes")
	flag.IntVar(&cfg.bandwidth, "bandwidth", 0, "backlog: cap the worker's link to Redis at this many bytes/s through a proxy (125000000: 1 Gbit/s; 0: direct)")
	gs := flag.String("goroutines", "1,32", "throughput: the numbers of scheduling goroutines")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	memprofile := flag.String("memprofile", "", "write an allocation profile of the run to this file")
	traceFile := flag.String("trace", "", "write a runtime execution trace of the run to this file (go tool trace)")
	flag.DurationVar(&cfg.schedSlice, "sched-slice", 0, "run the bench's process (its queues and clients) and wheelq-server (process.sched_slice) with this Linux time slice (wheel.SetSchedSlice; 6.12 or later); the Redis, beanstalkd and stress-ng it starts keep the kernel's default; 0: the kernel's default everywhere")
	loadCPU := flag.Int("load-cpu", 0, "run Debian's stress-ng --cpu N beside the workloads, from before the first to after the last (the machine busy with other work, as a shared host is); 0: none")
	loadApart := flag.Bool("load-apart", false, "run -load-cpu's stress-ng in a session of its own (setsid): under Linux's autogroup scheduling a group of its own, as another service on a shared host is; without it, it shares the bench's session and competes with the bench's threads thread by thread")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: wheelq-bench [flags]\n\nworkloads:\n")
		for _, w := range workloads {
			fmt.Fprintf(os.Stderr, "  %-11s %s\n", w.name, w.doc)
		}
		fmt.Fprintln(os.Stderr, "\nflags:")
		flag.PrintDefaults()
	}
	flag.Parse()
	for _, f := range strings.Split(*gs, ",") {
		g, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || g < 1 {
			fmt.Fprintf(os.Stderr, "wheelq-bench: bad -goroutines %q\n", *gs)
			os.Exit(2)
		}
		cfg.goroutines = append(cfg.goroutines, g)
	}
	if *loadApart && *loadCPU <= 0 {
		fmt.Fprintln(os.Stderr, "wheelq-bench: -load-apart needs -load-cpu N")
		os.Exit(2)
	}

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "wheelq-bench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "wheelq-bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err == nil {
			err = trace.Start(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "wheelq-bench:", err)
			os.Exit(1)
		}
		defer trace.Stop()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *loadCPU > 0 {
		end, err := startLoad(*loadCPU, *loadApart)
		if err != nil {
			fmt.Fprintln(os.Stderr, "wheelq-bench: -load-cpu:", err)
			os.Exit(1)
		}
		defer end()
	}
	if cfg.schedSlice != 0 {
		// After stress-ng started: its workers keep the kernel's slice.
		if err := wheel.SetSchedSlice(cfg.schedSlice); err != nil {
			fmt.Fprintln(os.Stderr, "wheelq-bench: -sched-slice:", err)
			os.Exit(1)
		}
	}
	want := strings.Split(names, ",")
	enc := json.NewEncoder(os.Stdout)
	emit := func(r result) {
		r["go"] = runtime.Version()
		r["gomaxprocs"] = runtime.GOMAXPROCS(0)
		r["time"] = time.Now().UTC().Format(time.RFC3339)
		r["load_cpu"] = *loadCPU
		if *loadCPU > 0 {
			r["load_apart"] = *loadApart
			r["autogroup"] = autogroup()
		}
		if cfg.schedSlice != 0 {
			r["sched_slice_us"] = cfg.schedSlice.Microseconds()
		}
		_ = enc.Encode(r)
	}
	ran := 0
	for _, w := range workloads {
		if names != "all" && !slices.Contains(want, w.name) {
			continue
		}
		ran++
		if err := w.run(ctx, &cfg, emit); err != nil {
			fmt.Fprintf(os.Stderr, "wheelq-bench: %s: %v\n", w.name, err)
			stop()
			pprof.StopCPUProfile()
			os.Exit(1)
		}
	}
	if *memprofile != "" {
		f, err := os.Create(*memprofile)
		if err == nil {
			err = pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "wheelq-bench:", err)
		}
	}
	if ran == 0 {
		fmt.Fprintf(os.Stderr, "wheelq-bench: no workload named %q\n", names)
		flag.Usage()
		os.Exit(2)
	}
}

// size returns cfg.n when set, else def (or quick when -quick).
func (c *config) size(def, quick int) int {
	switch {
	case c.n > 0:
		return c.n
	case c.quick:
		return quick
	}
	return def
}

// summary holds lateness percentiles in microseconds.
type summary struct {
	p50, p99, p999, max float64
}

func summarize(lat []time.Duration) summary {
	if len(lat) == 0 {
		return summary{}
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	q := func(p float64) float64 {
		i := int(p * float64(len(s)-1))
		return float64(s[i]) / 1e3
	}
	return summary{p50: q(0.50), p99: q(0.99), p999: q(0.999), max: float64(s[len(s)-1]) / 1e3}
}

func (s summary) into(r result) result {
	r["p50_us"] = round(s.p50)
	r["p99_us"] = round(s.p99)
	r["p999_us"] = round(s.p999)
	r["max_us"] = round(s.max)
	return r
}

func round(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
