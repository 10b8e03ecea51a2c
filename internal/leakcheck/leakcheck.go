// Package leakcheck finds goroutines left running after a package's tests:
// the owner of every goroutine must stop it. It is a small stand-in for
// go.uber.org/goleak, scoped to this module's own code.
package leakcheck

import (
	"fmt"
	"runtime"
	"strings"
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
