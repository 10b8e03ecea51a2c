//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wheelq/wheelq/wheel"
)

// wakeClock is the real clock with a sleeper that records, per Sleep, when
// it was due to return and when it did, and the thread's time waiting on a
// run queue meanwhile (when it woke on the thread it slept on: Go may run
// the goroutine on another). -wakes prints the late ones after the
// precision workload, to tell whether the thread waited for a CPU (held by
// another task: the machine) or ran and still woke late (the runtime, the
// sleeper). (The machine's /proc/pressure/cpu would say more, but its total
// moves only every 2 s.)
type wakeClock struct {
	mu    sync.Mutex
	t0    time.Time
	wakes []wakeRecord
}

type wakeRecord struct {
	deadline, returned time.Time
	sameThread         bool
	runDelay           time.Duration // this thread's, over the Sleep
}

func (c *wakeClock) Now() time.Time { return time.Now() }

func (c *wakeClock) NewSleeper() wheel.Sleeper {
	return &wakeSleeper{c: c, inner: wheel.RealClock().NewSleeper(), buf: make([]byte, 512)}
}

type wakeSleeper struct {
	c     *wakeClock
	inner wheel.Sleeper
	buf   []byte
}

func (s *wakeSleeper) Sleep(deadline time.Time) {
	tid := unix.Gettid()
	rd0 := threadRunDelay(s.buf)
	s.inner.Sleep(deadline)
	ret := time.Now()
	if deadline.IsZero() {
		return
	}
	r := wakeRecord{deadline: deadline, returned: ret, sameThread: unix.Gettid() == tid}
	r.runDelay = threadRunDelay(s.buf) - rd0
	s.c.mu.Lock()
	s.c.wakes = append(s.c.wakes, r)
	s.c.mu.Unlock()
}

func (s *wakeSleeper) Wake()        { s.inner.Wake() }
func (s *wakeSleeper) Close() error { return s.inner.Close() }

// report writes every wake later than min, and a summary.
func (c *wakeClock) report(w io.Writer, min time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	late, lateRQ := 0, 0
	for _, r := range c.wakes {
		l := r.returned.Sub(r.deadline)
		if l < min {
			continue
		}
		late++
		rd := "other thread"
		if r.sameThread {
			rd = fmt.Sprintf("thread run-queue wait %v", r.runDelay.Round(time.Microsecond))
			if r.runDelay >= l/2 {
				lateRQ++
			}
		}
		fmt.Fprintf(w, "wake due t0+%v late %v: %s\n",
			r.deadline.Sub(c.t0).Round(time.Microsecond), l.Round(time.Microsecond), rd)
	}
	fmt.Fprintf(w, "wakes %d, late (>= %v) %d, of which the thread waited for a CPU at least half the lateness: %d\n", len(c.wakes), min, late, lateRQ)
}

// threadRunDelay returns the calling thread's total time waiting on a run
// queue (the second field of /proc/thread-self/schedstat), 0 if unknown.
func threadRunDelay(buf []byte) time.Duration {
	return time.Duration(readField(buf, "/proc/thread-self/schedstat", 1))
}

// readField reads the first line of a small file and returns its field i
// (split at spaces).
func readField(buf []byte, path string, i int) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	n, _ := f.Read(buf)
	f.Close()
	line, _, _ := bytes.Cut(buf[:n], []byte{'\n'})
	fs := bytes.Fields(line)
	if i >= len(fs) {
		return 0
	}
	v, _ := strconv.ParseInt(string(fs[i]), 10, 64)
	return v
}

func newWakeClock() *wakeClock { return &wakeClock{} }

// procCPU returns the CPU time (user and system) the process has used.
func procCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sleepUntil blocks the calling thread in clock_nanosleep(2) until the
// monotonic clock reaches deadline (the floor workload: the kernel's own
// precise sleep, without Go's poller or timers).
func sleepUntil(deadline time.Time) {
	d := time.Until(deadline)
	if d <= 0 {
		return
	}
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		time.Sleep(d)
		return
	}
	ts = unix.NsecToTimespec(ts.Nano() + int64(d))
	for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil) == unix.EINTR {
	}
}

// sleeperThread sets the calling thread's timer slack to 1 ns (prctl
// PR_SET_TIMERSLACK; the default is 50 µs), so that clock_nanosleep wakes
// it at its deadline as a timerfd would: the floor workload's thread.
func sleeperThread() { _ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) }
