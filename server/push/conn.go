package push

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// maxReply is how much of a reply's body a delivery reads (and discards):
// a connection whose reply was longer is closed rather than kept.
const maxReply = 64 << 10

// idleFor is how long a kept connection may wait for its next push; one
// idle longer is closed rather than tried. Receivers close theirs after
// 5 s (Node, Apache) to 75 s (nginx); one they closed is seen so before
// it is used (or, closed meanwhile, by the push, which goes again on a
// new one).
const idleFor = 30 * time.Second

// poster posts to one receiver over keep-alive HTTP/1.1 connections it
// keeps, writing each request and reading its reply on the calling
// goroutine. net/http's Transport hands every request to two goroutines
// of its connection (one writes it, one reads the reply) and the reply
// back: at 10,000 pushes a second those two goroutines were a third of
// the server's CPU, and without them the server spends about 0.9x the
// CPU per push (docs/benchmarks-history.md, "A push on the caller's
// goroutine").
type poster struct {
	addr   string      // host:port
	tls    *tls.Config // nil: plain HTTP
	dialer net.Dialer
	now    func() time.Time

	mu     sync.Mutex
	idle   []*pconn // the most recently used last
	closed bool
}

// pconn is a kept connection.
type pconn struct {
	nc    net.Conn
	cr    countingReader
	cw    connWriter
	br    *bufio.Reader
	bw    *bufio.Writer
	since time.Time // idle since
}

// maxReplyRead bounds the bytes a push reads for its reply, head and
// body (http.ReadResponse has no bound on a head's size).
const maxReplyRead = 1<<20 + maxReply

// errReplyTooLarge is a reply whose head ran past maxReplyRead.
var errReplyTooLarge = errors.New("reply head too large")

// countingReader counts the bytes a connection gave for a push's reply
// (reset when it is kept): a kept connection that ends before the first
// byte of a reply was closed by the receiver while idle, and the request
// is sent again on a new one; and a reply that runs past maxReplyRead
// fails the push.
type countingReader struct {
	r net.Conn
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n >= maxReplyRead {
		return 0, errReplyTooLarge
	}
	n, err := c.r.Read(p[:min(int64(len(p)), maxReplyRead-c.n)])
	c.n += int64(n)
	return n, err
}

// connWriter writes to a connection and keeps the error a write met.
type connWriter struct {
	w   net.Conn
	err error
}

func (c *connWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil {
		c.err = err
	}
	return n, err
}

// ReadFrom copies a body in writes of 32 KiB, as the connection's own
// ReadFrom would (bufio.Writer hands it what it does not buffer), not 4.
func (c *connWriter) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(struct{ io.Writer }{c}, r)
}

func newPoster(addr string, tlsConf *tls.Config) *poster {
	return &poster{addr: addr, tls: tlsConf, now: time.Now}
}

// reply is what a delivery needs of a response.
type reply struct {
	status     int
	retryAfter string
}

// post sends req (whose body GetBody can give again) and reads its reply,
// within ctx. A kept connection the receiver had closed is retried once
// on a new connection.
func (p *poster) post(ctx context.Context, req *http.Request) (reply, error) {
	for try := 0; ; try++ {
		c, kept, err := p.get(ctx)
		if err != nil {
			return reply{}, err
		}
		if try > 0 {
			if req.Body, err = req.GetBody(); err != nil {
				p.drop(c)
				return reply{}, err
			}
		}
		r, keep, err := c.roundTrip(ctx, req)
		if err == nil {
			if keep {
				p.put(c)
			} else {
				p.drop(c)
			}
			return r, nil
		}
		p.drop(c)
		if kept && c.cr.n == 0 && try == 0 && ctx.Err() == nil && stale(err) {
			continue
		}
		return reply{}, err
	}
}

// stale says whether err is what a write to or a read from a connection
// the receiver closed while it was idle gives.
func stale(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// roundTrip writes req and reads its reply on c. keep says whether c may
// carry another request.
func (c *pconn) roundTrip(ctx context.Context, req *http.Request) (reply, bool, error) {
	if d, ok := ctx.Deadline(); ok {
		_ = c.nc.SetDeadline(d)
	}
	// An end of ctx without a deadline (the queue's shutdown) interrupts
	// what the connection is waiting for.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	r, keep, err := c.exchange(req)
	if !stop() {
		keep = false // ctx ended meanwhile: the deadline is in the past
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w: %w", cerr, err)
		} else if _, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) {
			// The connection's deadline is ctx's: it passed a moment
			// before ctx's own timer said so.
			err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
	}
	if keep {
		_ = c.nc.SetDeadline(time.Time{})
	}
	return r, keep, err
}

func (c *pconn) exchange(req *http.Request) (reply, bool, error) {
	err := req.Write(c.bw)
	if err == nil {
		err = c.bw.Flush()
	}
	if c.cw.err != nil {
		// The connection's own error: Request.Write gives one met
		// writing the body as the body's (http.requestBodyReadError,
		// which does not unwrap).
		err = c.cw.err
	}
	if err != nil {
		// A receiver may answer before it read the whole request (a 413,
		// a 429 with its Retry-After) and close: writing the rest meets
		// the reset, and the reply, if it came, is the push's.
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			return reply{}, false, err
		}
		r, _, rerr := c.read(req)
		if rerr != nil {
			return reply{}, false, err
		}
		return r, false, nil
	}
	return c.read(req)
}

// read reads the reply to req.
func (c *pconn) read(req *http.Request) (reply, bool, error) {
	resp, err := http.ReadResponse(c.br, req)
	// Informational replies (100 Continue and the like) come before the
	// reply; a protocol switch is none a push asked for.
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp, err = http.ReadResponse(c.br, req)
	}
	if err != nil {
		return reply{}, false, err
	}
	// The body is read (to its end, up to maxReply) only for the
	// connection's next reply: one not kept (Connection: close, or a
	// body that runs to the connection's end) is closed unread, and the
	// push has its reply at once rather than when the receiver ends the
	// body or the target's timeout passes. Nor is the body closed, which
	// reads the rest of it.
	keep := !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols
	if keep {
		n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxReply+1))
		keep = err == nil && n <= maxReply
	}
	return reply{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}, keep, nil
}

// maxErrText bounds the text of a push's error (bound): one about a reply
// that did not parse quotes the receiver's line, up to the reply's bound
// (a megabyte, four once quoted), one about a certificate names every
// host it is for, and the error is logged at every failed attempt.
const maxErrText = 512

// bound gives err, its text cut to maxErrText.
func bound(err error) error {
	if len(err.Error()) <= maxErrText {
		return err
	}
	return boundedError{err}
}

type boundedError struct{ err error }

func (e boundedError) Error() string {
	s := e.err.Error()
	cut := maxErrText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:cut], len(s))
}

func (e boundedError) Unwrap() error { return e.err }

// get gives a kept connection (kept true) or dials one.
func (p *poster) get(ctx context.Context) (c *pconn, kept bool, err error) {
	now := p.now()
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		c = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		if now.Sub(c.since) >= idleFor {
			// The most recently used is too old: so are the others.
			old := append(p.idle, c)
			p.idle = nil
			p.mu.Unlock()
			for _, o := range old {
				p.drop(o)
			}
			break
		}
		p.mu.Unlock()
		if p.tls != nil && quietTLS(c.nc.(*tls.Conn)) || p.tls == nil && quiet(c.nc) {
			return c, true, nil
		}
		p.drop(c)
	}
	nc, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, false, err
	}
	if p.tls != nil {
		tc := tls.Client(&recordConn{Conn: nc}, p.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, false, err
		}
		nc = tc
	}
	c = &pconn{nc: nc, cr: countingReader{r: nc}, cw: connWriter{w: nc}}
	c.br = bufio.NewReaderSize(&c.cr, 4096)
	c.bw = bufio.NewWriterSize(&c.cw, 4096)
	return c, false, nil
}

// quietTLS is quiet for a kept TLS connection: nothing the receiver sent
// on its socket nor in a record the connection already read off it (as
// it may with the reply's last) is data or the connection's end. Records
// read off the socket already that carry neither (a TLS 1.3 session
// ticket, a key update) are taken in passing. Bytes waiting on the
// socket, or a record read off it only in part, make it not quiet,
// whatever they are: a record cannot be told from a ticket's until it is
// whole, and its rest could be an unasked reply the next push would take
// as its own. (Go's client takes the server's tickets while it reads the
// first reply, so a kept connection is seldom dropped for one.)
func quietTLS(tc *tls.Conn) bool {
	rc, _ := tc.NetConn().(*recordConn)
	if !quiet(tc.NetConn()) || rc == nil || !rc.whole() {
		return false
	}
	_ = tc.SetReadDeadline(time.Unix(1, 0)) // past: records already read off the socket only
	var b [1]byte
	n, err := tc.Read(b[:])
	_ = tc.SetReadDeadline(time.Time{})
	return n == 0 && errors.Is(err, os.ErrDeadlineExceeded) && rc.whole()
}

// recordConn is a TLS connection's socket that follows the TLS record
// framing of what is read from it (a 5-byte header whose last two bytes
// are the body's length, then the body), so that quietTLS knows whether
// the bytes read off it end at a record's end. Reads only from the
// connection's reader (the push on it, or quietTLS between pushes).
type recordConn struct {
	net.Conn
	hdr  [5]byte
	hn   int // header bytes read of the current record
	body int // its body's bytes still to read
}

func (c *recordConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	for p := b[:n]; len(p) > 0; {
		if c.hn < len(c.hdr) {
			k := copy(c.hdr[c.hn:], p)
			c.hn += k
			p = p[k:]
			if c.hn == len(c.hdr) {
				c.body = int(c.hdr[3])<<8 | int(c.hdr[4])
			}
		}
		k := min(c.body, len(p))
		c.body -= k
		p = p[k:]
		if c.hn == len(c.hdr) && c.body == 0 {
			c.hn = 0 // the record is whole; the next begins
		}
	}
	return n, err
}

// whole says the bytes read so far end at a record's end.
func (c *recordConn) whole() bool { return c.hn == 0 && c.body == 0 }

// SyscallConn is the socket's, for quiet's look at it.
func (c *recordConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// put keeps c for the next push (up to maxIdlePerHost). One with bytes
// read past its reply is closed: the receiver sent what no push asked.
func (p *poster) put(c *pconn) {
	if c.br.Buffered() > 0 {
		p.drop(c)
		return
	}
	c.since = p.now()
	c.cr.n = 0
	p.mu.Lock()
	if !p.closed && len(p.idle) < maxIdlePerHost {
		p.idle = append(p.idle, c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		p.drop(c)
	}
}

func (p *poster) drop(c *pconn) { _ = c.nc.Close() }

// close closes the kept connections; pushes still running close theirs
// when they end.
func (p *poster) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		p.drop(c)
	}
}
