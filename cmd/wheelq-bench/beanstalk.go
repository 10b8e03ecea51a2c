package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func init() {
	workloads = append(workloads,
		workload{"beanstalkd", "Debian's beanstalkd (no binlog) on the server-* workloads: puts/s from 32 connections (64-byte bodies); 20,000 jobs due over [1s, 3s] (delays rounded up to its whole seconds) reserved by 8 connections (lateness against the intended due time and against the rounded one)", runBeanstalkd},
	)
}

// beanConn is a connection speaking beanstalkd's text protocol: just the
// commands the workload sends.
type beanConn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

func dialBean(addr string) (*beanConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &beanConn{c: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)}, nil
}

func (b *beanConn) line() (string, error) {
	s, err := b.r.ReadString('\n')
	return strings.TrimRight(s, "\r\n"), err
}

// put stores body due after delay whole seconds.
func (b *beanConn) put(delay int, body []byte) error {
	fmt.Fprintf(b.w, "put 0 %d 60 %d\r\n", delay, len(body))
	b.w.Write(body)
	b.w.WriteString("\r\n")
	if err := b.w.Flush(); err != nil {
		return err
	}
	l, err := b.line()
	if err == nil && !strings.HasPrefix(l, "INSERTED ") {
		err = errors.New("beanstalkd: " + l)
	}
	return err
}

// reserve waits up to timeout seconds for a job: its id and body ("" on
// a timeout).
func (b *beanConn) reserve(timeout int) (string, []byte, error) {
	fmt.Fprintf(b.w, "reserve-with-timeout %d\r\n", timeout)
	if err := b.w.Flush(); err != nil {
		return "", nil, err
	}
	l, err := b.line()
	if err != nil {
		return "", nil, err
	}
	if l == "TIMED_OUT" || l == "DEADLINE_SOON" {
		return "", nil, nil
	}
	f := strings.Fields(l)
	if len(f) != 3 || f[0] != "RESERVED" {
		return "", nil, errors.New("beanstalkd: " + l)
	}
	n, _ := strconv.Atoi(f[2])
	body := make([]byte, n+2)
	if _, err := ioReadFull(b.r, body); err != nil {
		return "", nil, err
	}
	return f[1], body[:n], nil
}

func (b *beanConn) delete(id string) error {
	fmt.Fprintf(b.w, "delete %s\r\n", id)
	if err := b.w.Flush(); err != nil {
		return err
	}
	l, err := b.line()
	if err == nil && l != "DELETED" {
		err = errors.New("beanstalkd: " + l)
	}
	return err
}

func ioReadFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// startBeanstalkd runs beanstalkd on a free loopback port until stop;
// with the bench's -sched-slice it gets the kernel's default slice back.
func startBeanstalkd(cfg *config) (addr string, pid int, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", 0, nil, err
	}
	addr = l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	l.Close()
	cmd := exec.Command("beanstalkd", "-l", "127.0.0.1", "-p", port)
	if err := cmd.Start(); err != nil {
		return "", 0, nil, fmt.Errorf("start beanstalkd (Debian's beanstalkd package): %w", err)
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	if err := kernelSliceIf(cfg, cmd.Process.Pid); err != nil {
		stop()
		return "", 0, nil, fmt.Errorf("beanstalkd's time slice back to the kernel's: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, cmd.Process.Pid, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", 0, nil, errors.New("beanstalkd did not listen")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pidCPU is a process's user+system CPU seconds (Linux).
func pidCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

func runBeanstalkd(ctx context.Context, cfg *config, emit func(result)) error {
	addr, pid, stop, err := startBeanstalkd(cfg)
	if err != nil {
		return err
	}
	defer stop()
	payload := bytes.Repeat([]byte("x"), 64)

	// Puts from 32 connections.
	n := cfg.size(40_000, 4_000)
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	cpu0 := pidCPU(pid)
	t0 := time.Now()
	for range 32 {
		c, err := dialBean(addr)
		if err != nil {
			return err
		}
		wg.Go(func() {
			defer c.c.Close()
			for k := next.Add(1) - 1; k < int64(n); k = next.Add(1) - 1 {
				if err := c.put(3600, payload); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	rate := float64(n) / time.Since(t0).Seconds()
	emit(result{"workload": "beanstalkd", "system": "beanstalkd put", "n": n, "connections": 32, "jobs_per_s": round(rate),
		"server_cpu_us_per_job": round((pidCPU(pid) - cpu0) * 1e6 / float64(n)), "errors": failed.Load()})

	// Due jobs reserved by 8 connections. The put tube holds the hour-long
	// jobs above: this phase uses a tube of its own.
	n = cfg.size(20_000, 2_000)
	lat, latRounded := newLateness(n), newLateness(n)
	wanted, rounded := make([]time.Time, n), make([]time.Time, n)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cw sync.WaitGroup
	for range 8 {
		c, err := dialBean(addr)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.w, "watch due\r\nignore default\r\n")
		c.w.Flush()
		c.line()
		c.line()
		cw.Go(func() {
			defer c.c.Close()
			for cctx.Err() == nil {
				id, body, err := c.reserve(1)
				at := time.Now()
				if err != nil {
					return
				}
				if id == "" {
					continue
				}
				if i, err := strconv.Atoi(string(body)); err == nil && i >= 0 && i < n {
					lat.record(i, wanted[i], at)
					latRounded.record(i, rounded[i], at)
				}
				_ = c.delete(id)
			}
		})
	}
	t0 = time.Now()
	ds := dues(t0, n, time.Second, 3*time.Second)
	copy(wanted, ds)
	next.Store(0)
	failed.Store(0)
	for range 32 {
		c, err := dialBean(addr)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.w, "use due\r\n")
		c.w.Flush()
		c.line()
		wg.Go(func() {
			defer c.c.Close()
			for k := next.Add(1) - 1; k < int64(n); k = next.Add(1) - 1 {
				now := time.Now()
				secs := int(math.Ceil(ds[k].Sub(now).Seconds()))
				rounded[k] = now.Add(time.Duration(secs) * time.Second)
				if err := c.put(secs, []byte(strconv.FormatInt(k, 10))); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	waitAll(ctx, lat, t0.Add(10*time.Second))
	cancel()
	cw.Wait()
	r := lat.result("beanstalkd", "beanstalkd reserve (against the intended due time)", n)
	r["put_errors"] = failed.Load()
	emit(r)
	emit(latRounded.result("beanstalkd", "beanstalkd reserve (against its rounded due time)", n))
	return nil
}
