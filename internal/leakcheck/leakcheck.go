// Package leakcheck finds goroutines left running after a package's tests:
// the owner of every goroutine must stop it. It is a small stand-in for
// go.uber.org/goleak, scoped to this module's own code.
package leakcheck

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Check waits up to five seconds for every goroutine running code of the
// module (its stack mentions pkgPrefix) to exit, and then returns an error
// listing those still there. The calling goroutine is ignored.
func Check(pkgPrefix string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		leaked := find(pkgPrefix)
		if len(leaked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leakcheck: %d goroutine(s) still running:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Running returns the ids ("goroutine 7") of the goroutines, other than
// the caller's, running code of the module (their stack mentions
// pkgPrefix). A goroutine started later has an id not seen before, so two
// calls' results are equal exactly when none started or stopped between
// them, whatever the goroutines were doing at each call.
func Running(pkgPrefix string) []string {
	stacks := find(pkgPrefix)
	ids := make([]string, len(stacks))
	for i, g := range stacks {
		head, _, _ := strings.Cut(g, " [")
		ids[i] = head
	}
	return ids
}

func find(prefix string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 || strings.Contains(g, "internal/leakcheck") {
			continue // the caller
		}
		if strings.Contains(g, prefix+".") || strings.Contains(g, prefix+"/") {
			out = append(out, g)
		}
	}
	return out
}

// Lifecycle checks the lifecycle shape every background component of the
// module shares, on fresh components from newComponent (start and stop
// are its Start and Stop, or what starts it when it starts lazily):
//
//   - Stop without Start, and Stop again, return; a Start after them
//     starts no goroutine;
//   - Start twice, then Stop twice;
//   - Starts and Stops from several goroutines at once (run under -race);
//   - Start after Stop starts nothing, and Stop then returns.
//
// Each call must return within ten seconds (a hang fails the test), and
// afterwards no goroutine running code of pkgPrefix may be left that was
// not running before. Run it from a test that is not parallel: the
// goroutines of tests running at the same time would be counted.
func Lifecycle(t testing.TB, pkgPrefix string, newComponent func() (start, stop func())) {
	t.Helper()
	before := map[string]bool{}
	for _, id := range Running(pkgPrefix) {
		before[id] = true
	}
	call := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { defer close(done); f() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("leakcheck: %s did not return within 10s", what)
		}
	}

	newSince := func() []string {
		var left []string
		for _, g := range find(pkgPrefix) {
			id, _, _ := strings.Cut(g, " [")
			if !before[id] {
				left = append(left, g)
			}
		}
		return left
	}

	start, stop := newComponent()
	call("Stop without Start", stop)
	call("a second Stop", stop)
	call("Start after a Stop without Start", start)
	if left := newSince(); len(left) > 0 {
		t.Fatalf("leakcheck: Start after Stop started %d goroutine(s):\n\n%s", len(left), strings.Join(left, "\n\n"))
	}
	call("Stop after that Start", stop)

	start, stop = newComponent()
	call("Start", start)
	call("a second Start", start)
	call("Stop", stop)
	call("a second Stop", stop)

	start, stop = newComponent()
	call("concurrent Starts and Stops", func() {
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(start)
			wg.Go(stop)
		}
		wg.Wait()
	})
	call("Stop after concurrent Starts and Stops", stop)

	start, stop = newComponent()
	call("Start", start)
	call("Stop", stop)
	call("Start after Stop", start)
	call("Stop after a Start after Stop", stop)

	deadline := time.Now().Add(5 * time.Second)
	for {
		left := newSince()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("leakcheck: %d goroutine(s) left running after Stop:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
