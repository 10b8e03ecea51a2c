package main

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"time"
)

func init() {
	workloads = append(workloads, workload{"floor",
		"what this machine gives any program, for the lateness figures beside it: W1's 20,000 due times (over [1s, 3s]) slept to by one locked OS thread in clock_nanosleep (Linux; a plain sleep elsewhere), no wheel, no Redis; then the same thread writing each due index to one of 8 loopback TCP connections whose readers record its arrival (due -> delivered to a blocked client, no protocol)",
		runFloor})
}

// runFloor measures the machine's floor under the lateness figures: a
// thread that does nothing but sleep to each due time, and the same
// thread handing each due time to a reader blocked on loopback TCP. What
// wheelq adds (the wheel, the claims, a protocol) is measured against
// these in the same session; a figure below them is beyond the machine.
func runFloor(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(20_000, 2_000)

	// A thread sleeping to each due time.
	{
		lat := newLateness(n)
		t0 := time.Now()
		ds := dues(t0, n, time.Second, 3*time.Second)
		cpu0 := procCPU()
		sleepThrough(ctx, ds, func(i int) { lat.record(i, ds[i], time.Now()) })
		r := lat.result("floor", "a locked thread sleeping to each due time", n)
		r["cpu_us_per_wake"] = round(float64(procCPU()-cpu0) / 1e3 / float64(n))
		emit(r)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}

	// The same, each due index written to one of 8 blocked readers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	const readers = 8
	lat := newLateness(n)
	t0 := time.Now()
	ds := dues(t0, n, time.Second, 3*time.Second)
	var servers []net.Conn
	var wg sync.WaitGroup
	defer func() {
		for _, c := range servers {
			_ = c.Close() // the readers see EOF and return
		}
		wg.Wait()
	}()
	for range readers {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		s, err := ln.Accept()
		if err != nil {
			_ = c.Close()
			return err
		}
		servers = append(servers, s)
		wg.Go(func() {
			defer c.Close()
			var b [4]byte
			for {
				if _, err := io.ReadFull(c, b[:]); err != nil {
					return // the writer closed its end
				}
				if i := int(binary.BigEndian.Uint32(b[:])); i < n {
					lat.record(i, ds[i], time.Now())
				}
			}
		})
	}
	cpu0 := procCPU()
	var writeErr error
	sleepThrough(ctx, ds, func(i int) {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(i))
		if _, err := servers[i%readers].Write(b[:]); err != nil && writeErr == nil {
			writeErr = err
		}
	})
	waitAll(ctx, lat, t0.Add(5*time.Second))
	cpu := procCPU() - cpu0
	r := lat.result("floor", "a locked thread writing each due index to one of 8 loopback TCP readers", n)
	r["cpu_us_per_job"] = round(float64(cpu) / 1e3 / float64(n))
	emit(r)
	return errors.Join(writeErr, ctx.Err())
}

// sleepThrough calls fire(i) for each due time ds[i], in due order, from
// one goroutine locked to its OS thread that sleeps to each (sleepUntil)
// and does nothing else.
func sleepThrough(ctx context.Context, ds []time.Time, fire func(i int)) {
	order := make([]int, len(ds))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return ds[a].Compare(ds[b]) })
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Locked for good: the thread, its timer slack set to the least
		// (sleeperThread), ends with the goroutine.
		runtime.LockOSThread()
		sleeperThread()
		for _, i := range order {
			if ctx.Err() != nil {
				return
			}
			sleepUntil(ds[i])
			fire(i)
		}
	}()
	<-done
}
