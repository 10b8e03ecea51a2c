package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/wheelq/wheelq/dashboard"
)

// serveCmd serves the web dashboard (package dashboard) of the namespace
// until ctx ends (an interrupt). It listens on loopback by default: the
// dashboard has no login of its own, so listening anywhere else needs
// -read-only or -allow-remote-actions (behind your own authenticating
// proxy).
func serveCmd(fs *flag.FlagSet) func([]string) (action, error) {
	addr := fs.String("addr", "127.0.0.1:8080", "host:port to listen on (port 0: any free port)")
	readOnly := fs.Bool("read-only", false, "show, but allow no action (requeue, cancel, run...)")
	remote := fs.Bool("allow-remote-actions", false, "allow actions on a non-loopback -addr (put an authenticating proxy in front)")
	title := fs.String("title", "wheelq", "the page's title")
	refresh := fs.Duration("refresh", 5*time.Second, "how often the page reloads its figures (0: never)")
	return func(args []string) (action, error) {
		if err := noArgs(args); err != nil {
			return nil, err
		}
		if *refresh < 0 {
			return nil, usagef("-refresh %v < 0 (0 turns reloading off)", *refresh)
		}
		host, _, err := net.SplitHostPort(*addr)
		if err != nil {
			return nil, usagef("bad -addr %q: %v (want host:port, like 127.0.0.1:8080)", *addr, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) && !*readOnly && !*remote {
			return nil, usagef("-addr %s is reachable from other hosts and the dashboard has no login:\n"+
				"add -read-only, or put it behind a proxy that authenticates and add -allow-remote-actions", *addr)
		}
		return func(ctx context.Context, c *cli) int {
			return c.serve(ctx, *addr, *readOnly, *title, *refresh)
		}, nil
	}
}

func (c *cli) serve(ctx context.Context, addr string, readOnly bool, title string, refresh time.Duration) int {
	rf := refresh
	if rf == 0 {
		rf = -1 // the dashboard's "never"
	}
	h, err := dashboard.New(c.q, dashboard.Options{ReadOnly: readOnly, Title: title, Timeout: c.timeout, Refresh: rf})
	if err != nil {
		return c.fail(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return c.fail(fmt.Errorf("listen on %s: %w (is another program on that port? pick another with -addr)", addr, err))
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	mode := ""
	if readOnly {
		mode = " (read-only)"
	}
	fmt.Fprintf(c.out, "wheelq: dashboard at http://%s/%s; interrupt to stop\n", l.Addr(), mode)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = srv.Shutdown(sctx)
		cancel()
		if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return c.fail(err)
	}
	return 0
}
