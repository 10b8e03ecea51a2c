// Package faultproxy is a fault-injecting TCP proxy for tests. It sits
// between a client (typically a go-redis client) and the server the test
// started on loopback, forwards bytes both ways, and can be told at any time
// to model the network faults of wheelq's fault model (see DESIGN.md):
//
//   - a slow reply (SetReplyDelay): the command applied, the reply came late;
//   - a slow request (SetRequestDelay): the command itself arrives late;
//   - a partition (Blackhole): bytes are lost both ways, connections stay open;
//   - a lost reply (DropReplies): the command applied, the reply is lost and
//     the connection dies, so the client may retry it;
//   - connection resets (CloseAll) and refused connections (Refuse);
//   - a slow link (SetBandwidth) for large replies.
//
// Every fault applies at once to the connections already open and to new
// ones, and can be changed or cleared while traffic flows. The proxy listens
// on 127.0.0.1 only and is meant for tests, not production.
//
// # How bytes move
//
// Each proxied connection is a pair: the client's connection to the proxy
// and the proxy's own connection to the target, dialled when the client's
// connection is accepted. Each direction has a reader, which reads chunks
// (up to 32 KiB, however the kernel delivered them) and stamps each with its
// arrival time, and a writer, which writes the chunks in order. At most 64
// chunks wait per direction; beyond that the reader stops reading, as TCP
// flow control would.
//
// A chunk is dropped by Blackhole (or, from the server, by DropReplies) if
// that fault is on when the chunk is read or when it is due to be written.
// When one side ends its stream (EOF or error), what was already read is
// still written (subject to the faults), then both sides are closed; a
// write error closes both sides at once.
package faultproxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	chunkSize   = 32 << 10 // largest read from one side
	queueChunks = 64       // chunks waiting per direction before the reader stops
	dialTimeout = 5 * time.Second
	// pacePerSlice is how much time's worth of bytes SetBandwidth lets one
	// write carry: the link is paced in slices of bytesPerSec/20 bytes.
	pacePerSlice = 50 * time.Millisecond
)

// Proxy is a fault-injecting TCP proxy. Its methods are safe for concurrent
// use. Create it with New or Start; stop it with Close.
type Proxy struct {
	target   string
	ln       net.Listener
	wg       sync.WaitGroup // the accept loop and every connection's goroutines
	accepted atomic.Int64

	mu      sync.Mutex
	closed  bool
	conns   map[*conn]struct{}
	f       faults
	changed chan struct{} // closed and replaced whenever f changes
	bwNext  time.Time     // SetBandwidth pacing: when the link is next free
}

// faults is a snapshot of the settings.
type faults struct {
	replyDelay   time.Duration
	requestDelay time.Duration
	blackhole    bool
	dropReplies  bool
	refuse       bool
	bandwidth    int    // bytes per second server→client; 0 = unlimited
	bwEpoch      uint64 // bumped by SetBandwidth: older reservations are void
}

// New starts a proxy listening on a free port of 127.0.0.1 that forwards
// every accepted connection to target (host:port). The caller must Close it.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		target:  target,
		ln:      ln,
		conns:   make(map[*conn]struct{}),
		changed: make(chan struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Start is New for a test: it fails the test if the proxy cannot start and
// closes the proxy at the test's cleanup.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr returns the proxy's address (127.0.0.1:port): point the client here.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, closes every connection (both sides) and waits
// until every goroutine the proxy started has returned. Bytes held by a
// delay are discarded. Close may be called more than once; later calls
// return nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.closeConns(false)
	p.wg.Wait()
	return err
}

// CloseAll resets every connection open now, both sides at once: the
// client's connection is closed with an RST (SO_LINGER 0), so the client
// sees "connection reset" or EOF on its next read or write; bytes held by
// a delay are discarded. New connections are accepted as usual.
func (p *Proxy) CloseAll() { p.closeConns(true) }

func (p *Proxy) closeConns(reset bool) {
	p.mu.Lock()
	cs := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.close(reset)
	}
}

// SetReplyDelay holds every chunk from the server for d after it arrived
// before writing it to the client, keeping order; client→server bytes are
// not affected. It models "the command applied, the reply came late": with
// a client read timeout below d, the client times out although the server
// applied the command. Changing d applies to the chunks already held (each
// is then due at its arrival time plus the new d), so 0 clears the fault
// and releases everything held at once.
func (p *Proxy) SetReplyDelay(d time.Duration) {
	p.update(func(f *faults) { f.replyDelay = max(d, 0) })
}

// SetRequestDelay is SetReplyDelay for client→server bytes: the command
// itself reaches the server d late; replies are not delayed further.
func (p *Proxy) SetRequestDelay(d time.Duration) {
	p.update(func(f *faults) { f.requestDelay = max(d, 0) })
}

// Blackhole models a network partition. While on, every chunk read from
// either side, and every held chunk that falls due, is discarded (lost, not
// delivered later); connections stay open, so a client sees read timeouts,
// not resets. New connections are still accepted (and dialled to the
// target), but nothing passes on them. Turning it off lets later bytes pass
// again; a connection that lost bytes has a broken byte stream, so the
// client must discard it (go-redis discards a connection after a timeout)
// and use a fresh one.
func (p *Proxy) Blackhole(on bool) {
	p.update(func(f *faults) { f.blackhole = on })
}

// DropReplies models a lost reply. While on, client→server bytes pass (the
// command reaches the server and applies), and as soon as a chunk from the
// server arrives (or a held one falls due) it is discarded and the
// connection is closed, both sides: the client sees EOF or a reset instead
// of its reply. A go-redis client with retries then re-sends the command on
// a new connection (whose handshake also fails while DropReplies is on).
func (p *Proxy) DropReplies(on bool) {
	p.update(func(f *faults) { f.dropReplies = on })
}

// SetBandwidth caps the server→client throughput of the whole proxy (all
// connections share the link) at bytesPerSec, by pacing writes in slices of
// bytesPerSec/20 bytes; 0 (or less) removes the cap. Client→server bytes are
// not capped. A reply of n bytes takes at least about n/bytesPerSec.
func (p *Proxy) SetBandwidth(bytesPerSec int) {
	p.update(func(f *faults) {
		f.bandwidth = max(bytesPerSec, 0)
		f.bwEpoch++
		p.bwNext = time.Time{}
	})
}

// Refuse, while on, closes every newly accepted connection at once with an
// RST, before dialling the target: the client's TCP connect succeeds (the
// kernel completed it) but its first read or write fails with a reset or
// EOF, much like a refused connection. Connections already open are not
// affected (use CloseAll for them).
func (p *Proxy) Refuse(on bool) {
	p.update(func(f *faults) { f.refuse = on })
}

// Conns returns the number of connections being proxied now (accepted, not
// refused, not yet closed).
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted returns how many connections the proxy has accepted since New,
// including those closed by Refuse.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

func (p *Proxy) update(fn func(*faults)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(&p.f)
	close(p.changed)
	p.changed = make(chan struct{})
}

// snapshot returns the current settings and a channel closed when they
// next change.
func (p *Proxy) snapshot() (faults, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.f, p.changed
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure (such as too many open files): wait a
			// little rather than spin; Close still ends the loop.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.accepted.Add(1)
		p.mu.Lock()
		if p.closed || p.f.refuse {
			p.mu.Unlock()
			reset(nc)
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		c := &conn{p: p, client: nc, ctx: ctx, cancel: cancel}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go c.serve()
	}
}

// conn is one proxied connection: client is the accepted side, server the
// dialled side. ctx is cancelled when the pair is closed.
type conn struct {
	p      *Proxy
	client net.Conn
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	server net.Conn // nil until dialled
	closed bool
}

// serve dials the target and runs the four goroutines of the pair.
func (c *conn) serve() {
	defer c.p.wg.Done()
	defer c.close(false)
	d := net.Dialer{Timeout: dialTimeout}
	sc, err := d.DialContext(c.ctx, "tcp", c.p.target)
	if err != nil {
		c.close(true)
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = sc.Close()
		return
	}
	c.server = sc
	c.mu.Unlock()

	var wg sync.WaitGroup
	up := make(chan chunk, queueChunks)   // client → server
	down := make(chan chunk, queueChunks) // server → client
	wg.Add(4)
	go func() { defer wg.Done(); c.read(c.client, up) }()
	go func() { defer wg.Done(); c.write(sc, up, false) }()
	go func() { defer wg.Done(); c.read(sc, down) }()
	go func() { defer wg.Done(); c.write(c.client, down, true) }()
	wg.Wait()
}

// close closes both sides once and forgets the pair. reset sends an RST to
// the client instead of a FIN.
func (c *conn) close(rst bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	sc := c.server
	c.mu.Unlock()

	c.cancel()
	if rst {
		reset(c.client)
	} else {
		_ = c.client.Close()
	}
	if sc != nil {
		_ = sc.Close()
	}
	c.p.mu.Lock()
	delete(c.p.conns, c)
	c.p.mu.Unlock()
}

type chunk struct {
	b  []byte
	at time.Time // when it was read
}

// read reads chunks from src into q until src fails or the pair closes,
// dropping those read while a blackhole (or, from the server, DropReplies)
// is on. It closes q when done so that the writer delivers what is queued
// and then closes the pair.
func (c *conn) read(src net.Conn, q chan<- chunk) {
	defer close(q)
	fromServer := src != c.client
	for {
		buf := make([]byte, chunkSize)
		n, err := src.Read(buf)
		if n > 0 {
			f, _ := c.p.snapshot()
			switch {
			case f.blackhole:
				// lost in the partition
			case fromServer && f.dropReplies:
				c.close(false)
				return
			default:
				select {
				case q <- chunk{b: buf[:n], at: time.Now()}:
				case <-c.ctx.Done():
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// write writes the chunks of q to dst, in order, each when it falls due,
// applying the faults current at that moment. toClient tells the
// server→client direction. When q is closed and drained, or a write fails,
// it closes the pair.
func (c *conn) write(dst net.Conn, q <-chan chunk, toClient bool) {
	defer c.close(false)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	// sleep waits until t, a change of the faults, or the pair's close; it
	// reports false on close.
	sleep := func(t time.Time, changed <-chan struct{}) bool {
		d := time.Until(t)
		if d <= 0 {
			return true
		}
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
			return true
		case <-changed:
			timer.Stop()
			return true
		case <-c.ctx.Done():
			return false
		}
	}
	for {
		var ch chunk
		var ok bool
		select {
		case ch, ok = <-q:
			if !ok {
				return
			}
		case <-c.ctx.Done():
			return
		}
		b := ch.b
		// resv is the pacing reservation for the next slice of b, if any.
		var resv struct {
			ok    bool
			epoch uint64
			at    time.Time
		}
		for len(b) > 0 {
			f, changed := c.p.snapshot()
			delay := f.requestDelay
			if toClient {
				delay = f.replyDelay
			}
			if due := ch.at.Add(delay); time.Now().Before(due) {
				if !sleep(due, changed) {
					return
				}
				continue // re-check the faults
			}
			if f.blackhole {
				break // lost
			}
			if toClient && f.dropReplies {
				return // closes the pair
			}
			n := len(b)
			if toClient && f.bandwidth > 0 {
				n = min(n, max(f.bandwidth/int(time.Second/pacePerSlice), 1))
				if !resv.ok || resv.epoch != f.bwEpoch {
					resv.ok, resv.epoch, resv.at = true, f.bwEpoch, c.p.reserve(n, f.bandwidth)
				}
				if time.Now().Before(resv.at) {
					if !sleep(resv.at, changed) {
						return
					}
					continue // re-check the faults; the reservation stands
				}
			}
			if _, err := dst.Write(b[:n]); err != nil {
				return
			}
			resv.ok = false
			b = b[n:]
		}
	}
}

// reserve books n bytes on the shared server→client link at rate bytes per
// second and returns when they may be sent.
func (p *Proxy) reserve(n, rate int) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	start := p.bwNext
	if start.Before(now) {
		start = now
	}
	p.bwNext = start.Add(time.Duration(int64(n) * int64(time.Second) / int64(rate)))
	return start
}

// reset closes nc with an RST rather than a FIN where it can.
func reset(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = nc.Close()
}
