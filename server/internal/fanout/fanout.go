// Package fanout runs a call per item on a bounded number of goroutines,
// so that the queue calls they make share Redis round trips (the
// library's group commit gathers concurrent calls).
package fanout

import "sync"

// Each runs f(0..n-1) on up to workers goroutines and returns when all
// returned.
func Each(n, workers int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
