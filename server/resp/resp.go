// Package resp is the wheelq server's Redis-protocol front end: any Redis
// client (redis-cli, redis-py, phpredis, go-redis, ...) schedules,
// cancels, reserves and acks with native commands prefixed WQ. (see
// docs/resp.md), after the connection commands clients send on their own
// (HELLO, AUTH, SELECT 0, CLIENT SETNAME and SETINFO, PING, QUIT,
// COMMAND). It speaks RESP2, and RESP3 after HELLO 3 (maps and nulls in
// RESP3's types; everything else is the same in both). It is thin over the library's public API,
// as package httpapi is, with the same tokens, permissions and error codes
// (apierr: the error's prefix is its code in capitals).
//
// Built on github.com/tidwall/redcon (its reader, writer and connection
// loop: pipelined commands are answered in order, each connection has its
// own goroutine, so a blocked WQ.RESERVE holds only its own).
package resp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/internal/errmap"
)

// Options configures the front end.
type Options struct {
	// MaxConns caps the open connections; past it a new one is refused
	// with an error and closed.
	MaxConns int
	// IdleTimeout closes a connection that sends nothing for that long
	// (0: never).
	IdleTimeout time.Duration
	// MaxCommandBytes caps what a connection may send without a command
	// being completed: a larger command (or a client that never finishes
	// one) is refused and the connection closed, before its bytes
	// accumulate.
	MaxCommandBytes int64
	// MaxInflightBytes bounds the bytes of commands all connections hold
	// at once, past each connection's first 64 KiB (0: no bound): a
	// connection whose command would take the total past it is answered
	// -UNAVAILABLE and closed. A command's bytes count from their reading
	// until it has run, and the commands read together until the last of
	// them has, except that a WQ.RESERVE about to block gives back the
	// bytes of those that ran before it (it keeps its own and those after
	// it).
	MaxInflightBytes int64
	// MaxBlock bounds WQ.RESERVE's BLOCK.
	MaxBlock time.Duration
	// Timeout bounds the queue calls of a command that does not block.
	Timeout time.Duration
	// DelayedQueue turns on the delayedqueue compatibility mode: SADD,
	// SPOP, KEYS, SCARD and DEL on queues (topics), as delayedqueue gave
	// them (docs/resp.md).
	DelayedQueue bool
	// Logger gets panics and internal errors.
	Logger *slog.Logger
}

// Server is the RESP front end of one queue.
type Server struct {
	q     *wheelq.Queue
	authz func() *auth.Authorizer
	opts  Options
	srv   *redcon.Server
	cmds  map[string]spec // the command table: never changed after New
	conns atomic.Int64
	// inflight is Options.MaxInflightBytes's count (nil without one).
	inflight *budget

	// blockCtx ends every blocked WQ.RESERVE at Close.
	blockCtx context.Context
	stop     context.CancelFunc
	closed   sync.Once

	// reauth is cancelled (and replaced) by Reauth: blocked WQ.RESERVEs
	// stop waiting and check their token again. Guarded by mu.
	mu           sync.Mutex
	reauth       context.Context
	reauthCancel context.CancelFunc
	// stopping is set by Shutdown (guarded by mu): commands read after it
	// are answered -UNAVAILABLE, and each reply is flushed as it is
	// written; running counts the commands under way (added to under mu
	// while not stopping), which Shutdown waits for.
	stopping bool
	running  sync.WaitGroup
}

// Reauth tells blocked WQ.RESERVEs that the tokens were reloaded: each
// checks its connection's token again at once, and one revoked answers
// NOAUTH (handing back what it had reserved); the others answer as at
// their timeout (a null array). The server calls it after swapping its
// authorizer.
func (s *Server) Reauth() {
	s.mu.Lock()
	old := s.reauthCancel
	s.reauth, s.reauthCancel = context.WithCancel(context.Background())
	s.mu.Unlock()
	old()
}

// isStopping says Shutdown has begun.
func (s *Server) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// reauthCtx is the context Reauth ends next.
func (s *Server) reauthCtx() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reauth
}

// session is a connection's state.
type session struct {
	p    *auth.Principal
	name string
	lim  *limitedConn
	// token is what the connection authenticated with, and az the
	// authorizer that took it: when the server swaps its authorizer
	// (SIGHUP), the next command authenticates the token again, so a
	// revoked token is refused on open connections too.
	token string
	az    *auth.Authorizer
	// proto is the protocol HELLO chose: 2 (the default) or 3.
	proto int
	// closed says the connection was closed by a command (QUIT, a
	// reserve whose client left): commands read with it are not run.
	closed bool
}

// began tells the connection's reader that cmds begin, in order: serve's
// command, and the commands a pipelined batch (schedulePipelined,
// ackPipelined, cmdSAdd) takes after its first. Those before them were
// run (limitedConn.began).
func (sess *session) began(cmds ...redcon.Command) {
	if sess.lim == nil {
		return
	}
	for _, cmd := range cmds {
		sess.lim.began(len(cmd.Raw))
	}
}

// reauth authenticates the session's token again if the server's tokens
// were reloaded since it did (sess.p is then nil if it is refused now).
func (sess *session) reauth(s *Server) {
	if sess.p == nil {
		return
	}
	if az := s.authz(); az != sess.az {
		p, err := az.Authenticate(sess.token)
		sess.p, sess.az = p, az
		if err != nil {
			sess.p = nil
		}
	}
}

// out writes the replies whose shape depends on the protocol.
func (sess *session) out(c redcon.Conn) replier { return replier{c, sess.proto == 3} }

// replier writes a map, or a null, as the connection's protocol says it:
// RESP3's map and null, or RESP2's flat array and null bulk (null array).
type replier struct {
	c     redcon.Conn
	resp3 bool
}

// Map starts a map of n pairs (RESP2: an array of 2n).
func (w replier) Map(n int) {
	if w.resp3 {
		w.c.WriteRaw([]byte("%" + strconv.Itoa(n) + "\r\n"))
		return
	}
	w.c.WriteArray(2 * n)
}

// Null writes a null (RESP2: a null bulk string).
func (w replier) Null() {
	if w.resp3 {
		w.c.WriteRaw([]byte("_\r\n"))
		return
	}
	w.c.WriteNull()
}

// NullArray writes a null where an array was expected (RESP2: *-1).
func (w replier) NullArray() {
	if w.resp3 {
		w.c.WriteRaw([]byte("_\r\n"))
		return
	}
	w.c.WriteArray(-1)
}

// New builds the front end over q; authz gives the current authorizer
// (the server swaps it on SIGHUP).
func New(q *wheelq.Queue, authz func() *auth.Authorizer, opts Options) *Server {
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{q: q, authz: authz, opts: opts, cmds: newTable()}
	if opts.MaxInflightBytes > 0 {
		s.inflight = &budget{max: opts.MaxInflightBytes}
	}
	if opts.DelayedQueue {
		compatTable(s.cmds)
	}
	s.blockCtx, s.stop = context.WithCancel(context.Background())
	s.reauth, s.reauthCancel = context.WithCancel(context.Background())
	s.srv = redcon.NewServerNetwork("tcp", "", s.serve, s.accept, s.closedConn)
	s.srv.SetIdleClose(opts.IdleTimeout)
	return s
}

// Serve serves connections from l until Close.
func (s *Server) Serve(l net.Listener) error {
	return s.srv.Serve(&limitedListener{Listener: l, max: s.opts.MaxCommandBytes, inflight: s.inflight})
}

// Shutdown stops gracefully: commands read from now on are answered
// -UNAVAILABLE, blocked reserves answer a null array, and the commands
// under way finish and their replies are written (an SPOP's jobs are
// finished before its reply: a reply dropped would lose them) before the
// connections close, within ctx; then Close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.stop() // blocked reserves answer
	done := make(chan struct{})
	go func() { s.running.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("resp: commands still running at the shutdown's end: %w", ctx.Err())
	}
	return errors.Join(err, s.Close())
}

// Close ends blocked reserves (they answer a null array), stops
// accepting and closes every connection at once (Shutdown first lets the
// commands under way finish).
func (s *Server) Close() error {
	var err error
	s.closed.Do(func() {
		s.stop()
		err = s.srv.Close()
	})
	return err
}

func (s *Server) accept(c redcon.Conn) bool {
	if s.conns.Add(1) > int64(s.opts.MaxConns) {
		s.conns.Add(-1)
		c.WriteError("ERR max number of clients reached")
		_ = redcon.BaseWriter(c).Flush()
		return false
	}
	sess := &session{}
	if lc, ok := c.NetConn().(*limitedConn); ok {
		sess.lim = lc
	}
	az := s.authz()
	if p, err := az.Authenticate(""); err == nil {
		sess.p, sess.az = p, az // a loopback server without tokens
		if sess.lim != nil {
			sess.lim.authed.Store(true)
		}
	}
	c.SetContext(sess)
	return true
}

func (s *Server) closedConn(redcon.Conn, error) { s.conns.Add(-1) }

// serve runs one command: it checks its arity and the connection's
// authentication, then runs it, turning a panic into an error reply.
func (s *Server) serve(c redcon.Conn, cmd redcon.Command) {
	sess, _ := c.Context().(*session)
	if sess == nil {
		sess = &session{}
		c.SetContext(sess)
	}
	sess.began(cmd)
	if sess.closed {
		return // after QUIT, or a reserve that closed the connection
	}
	s.mu.Lock()
	stopping := s.stopping
	if !stopping {
		s.running.Add(1)
	}
	s.mu.Unlock()
	if stopping {
		c.WriteError("UNAVAILABLE the server is stopping")
		_ = redcon.BaseWriter(c).Flush()
		return
	}
	defer s.running.Done()
	defer func() {
		if s.isStopping() {
			// The connections close soon: what this command wrote goes
			// out now, not with the rest of its pipeline.
			_ = redcon.BaseWriter(c).Flush()
		}
	}()
	defer func() {
		if v := recover(); v != nil {
			s.opts.Logger.Error("wheelq server: panic serving a RESP command", "panic", v)
			c.WriteError("ERR internal error")
		}
	}()
	// The tokens may have been reloaded: a revoked token is refused, and
	// its connection held to what one not authenticated may send
	// unfinished, whatever the command (an unknown one too).
	sess.reauth(s)
	if sess.lim != nil {
		defer func() { sess.lim.authed.Store(sess.p != nil) }()
	}
	name := strings.ToLower(string(cmd.Args[0]))
	if name == "post" || name == "host:" {
		// An HTTP request, each of its lines an inline command: a web
		// page's, sent by a browser to this port (a server without
		// tokens serves anyone on loopback), whose body's lines would
		// run as commands. As Redis does: the connection is closed, and
		// nothing read with it runs.
		s.opts.Logger.Warn("wheelq server: a RESP connection sent an HTTP request (a cross-protocol attack from a web page?): closed", "remote", c.RemoteAddr())
		sess.closed = true
		_ = c.Close()
		return
	}
	spec, ok := s.cmds[name]
	if !ok {
		c.WriteError(fmt.Sprintf("ERR unknown command '%s', with args beginning with: %s", clip(cmd.Args[0]), argsPreview(cmd.Args[1:])))
		return
	}
	if n := len(cmd.Args); (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
		c.WriteError(fmt.Sprintf("ERR wrong number of arguments for '%s' command", name))
		return
	}
	if sess.p == nil && !spec.noauth {
		c.WriteError("NOAUTH Authentication required.")
		return
	}
	if err := spec.run(s, c, sess, cmd.Args[1:]); err != nil {
		if reads[name] {
			err = errmap.FromRead(err) // a timeout is UNAVAILABLE: nothing was applied
		}
		s.writeErr(c, err)
	}
}

// reads are the commands that change nothing: their errors are mapped by
// errmap.FromRead, so a timeout is -UNAVAILABLE, not -OUTCOMEUNKNOWN.
var reads = map[string]bool{"wq.get": true, "wq.counts": true, "wq.recurs": true, "keys": true, "scard": true}

// writeErr answers err with its code's prefix.
func (s *Server) writeErr(c redcon.Conn, err error) {
	e := errmap.From(err)
	if e.Code == apierr.Internal {
		s.opts.Logger.Error("wheelq server: internal error (RESP)", "err", err)
		e = apierr.New(apierr.Internal, "internal error (logged by the server)")
	}
	c.WriteError(Prefix(e.Code) + " " + oneLine(e.Message))
}

// Prefix is the RESP error prefix of code: its name in capitals without
// '_' ("RESERVATIONLOST"), and ERR for invalid input, as Redis says it.
func Prefix(code apierr.Code) string {
	if code == apierr.Invalid {
		return "ERR"
	}
	return code.RESPPrefix()
}

func oneLine(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

func clip(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
	}
	return oneLine(string(b))
}

func argsPreview(args [][]byte) string {
	var parts []string
	for i, a := range args {
		if i == 3 {
			break
		}
		parts = append(parts, "'"+clip(a)+"'")
	}
	return strings.Join(parts, " ")
}

// errLimit is a connection past MaxCommandBytes.
var errLimit = errors.New("command too large")

// errBusy is a connection refused by Options.MaxInflightBytes.
var errBusy = errors.New("the server holds too many bytes of unfinished commands (resp.max_inflight_bytes): retry")

// limitedListener wraps each connection in a limitedConn.
type limitedListener struct {
	net.Listener
	max      int64
	inflight *budget
}

func (l *limitedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := newLimitedConn(c, l.max)
	lc.inflight = l.inflight
	return lc, nil
}

// freeBytes is what each connection may hold of commands without
// counting against Options.MaxInflightBytes: as much as one that has not
// authenticated may hold at all (preAuthMax), so strangers and the usual
// small commands never touch the shared count (max_conns bounds what they
// hold), and a connection holding its large commands' share cannot stop
// the others' small ones.
const freeBytes = preAuthMax

// budget counts the bytes of commands the connections hold, past
// freeBytes each, against a maximum (Options.MaxInflightBytes). A nil
// budget bounds nothing. Safe for concurrent use.
type budget struct {
	max  int64
	used atomic.Int64
}

// take adds n bytes to the count, or nothing and false when that would
// take it past the maximum.
func (b *budget) take(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	if b.used.Add(n) > b.max {
		b.used.Add(-n)
		return false
	}
	return true
}

// give takes n bytes taken before off the count.
func (b *budget) give(n int64) {
	if b != nil && n > 0 {
		b.used.Add(-n)
	}
}

// preAuthMax caps an unfinished command before the connection has
// authenticated (AUTH and HELLO are short), as Redis caps an
// unauthenticated client's: a stranger cannot make the server hold
// MaxCommandBytes per connection.
const preAuthMax = 64 << 10

// readChunk is the least room a limitedConn reads into.
const readChunk = 16 << 10

// limitedConn is what redcon reads a connection through. It hands redcon
// whole commands only: the bytes of an unfinished one wait here until it
// is complete (frames finds where each ends). redcon parses an unfinished
// command from its first byte again on every read, so a client sending a
// large command a few bytes at a time made the server's work grow with
// the square of its size (a connection sending 1 KB/s kept a core busy);
// now each command is parsed once. An unfinished command past max bytes
// (preAuthMax before the connection authenticated) is refused and the
// connection closed, and so is a frame whose stated length is out of
// bounds (frames), and a command whose bytes the server-wide budget
// (inflight) cannot hold.
//
// The bytes a connection holds count against that budget from their
// reading until redcon comes back for more (it has run every command it
// parsed then), or, for a command about to block (WQ.RESERVE's BLOCK),
// until settle: the commands redcon parsed with it and ran before it are
// done, and their bytes no longer count while it waits.
type limitedConn struct {
	net.Conn
	max int64
	// authed says the session has authenticated (set by the command
	// loop): the whole max applies.
	authed atomic.Bool

	// Owned by the reader (redcon's connection goroutine): buf[r:w] read
	// from the network and not yet handed on, of which buf[r:ready] are
	// whole commands; refused is the frame check's refusal and err the
	// network's error, each returned once the whole commands before it
	// were handed on.
	frames      *frames
	buf         []byte
	r, ready, w int
	refused     error
	err         error
	// held is the bytes read and not yet run: buf[r:w], and what was
	// handed on since redcon last came back for more with every command
	// handed to it run (Read finds r == ready), less what settle found
	// run since.
	held int64
	// ran is the bytes of the commands handed on since then that have
	// run (each began before the one running now), less what settle gave
	// back, and cur those of the one running now (began last), each
	// counted as its Raw. Raw is a command's bytes on the wire for a RESP
	// array, not for an inline command, so settle gives nothing back when
	// one may have been handed on since then (an overcount, never an
	// undercount): read counts the bytes read from the network, from is
	// that count at the first byte handed on since then, and inlineTo at
	// the end of the last read in which an inline command began.
	ran, cur   int64
	read, from int64
	inlineTo   int64

	// inflight is the server's budget (nil: none); charged is what this
	// connection has taken of it, max(0, held-freeBytes) after each read,
	// all of it given back by Close (gone). Guarded by mu: Close may come
	// from another goroutine (the server's Close) while a read is under
	// way.
	inflight *budget
	mu       sync.Mutex
	charged  int64
	gone     bool
}

func newLimitedConn(c net.Conn, max int64) *limitedConn {
	return &limitedConn{Conn: c, max: max, frames: newFrames(max)}
}

func (c *limitedConn) Read(b []byte) (int, error) {
	if c.ready == c.r {
		// redcon reads again only once it has run every command it
		// parsed; what it was handed ended at a command's end, so it
		// holds none of those bytes now.
		c.ran, c.cur = 0, 0
		c.from = c.read - int64(c.w-c.r)
		if c.held != int64(c.w-c.r) {
			c.held = int64(c.w - c.r)
			c.charge()
		}
	}
	for c.ready == c.r {
		switch {
		case c.refused != nil:
			return 0, c.refuse()
		case c.err != nil:
			return 0, c.err
		}
		if c.r == c.w {
			c.r, c.ready, c.w = 0, 0, 0
			if len(c.buf) > 4*readChunk {
				c.buf = nil // a large command's room is not kept
			}
		}
		if most := c.limit(); most > 0 && int64(c.w-c.r) > most {
			_, _ = c.Conn.Write([]byte("-ERR command past the limit of the server (resp.max_command_bytes)\r\n"))
			c.err = errLimit
			return 0, errLimit
		}
		if len(c.buf)-c.w < readChunk {
			c.room()
		}
		n, err := c.Conn.Read(c.buf[c.w:])
		if n > 0 {
			done, ferr := c.frames.scan(c.buf[c.w : c.w+n])
			if done > 0 {
				c.ready = c.w + done
			}
			c.w += n
			c.held += int64(n)
			c.read += int64(n)
			if c.frames.inline {
				c.frames.inline = false
				c.inlineTo = c.read
			}
			c.refused = ferr
			if !c.charge() && c.refused == nil {
				c.refused = errBusy
			}
		}
		if err != nil {
			c.err = err
		}
	}
	n := copy(b, c.buf[c.r:c.ready])
	c.r += n
	return n, nil
}

// began records that the command of n bytes (its Raw) begins: the one
// before it since redcon last read has run. Called on redcon's
// connection goroutine, the reader's, by serve (and for the commands a
// pipelined batch takes with its first).
func (c *limitedConn) began(n int) {
	c.ran += c.cur
	c.cur = int64(n)
}

// settle gives back, when the current command is about to block, the
// bytes of the commands redcon parsed with it and ran before it: held
// becomes what the connection still holds, the current command, what
// redcon has not run or not parsed yet, and buf[r:w]. It lowers the count
// only, and drops a large buffer of which that leaves little. Called on
// redcon's connection goroutine, which is the reader's (redcon runs the
// commands it parsed between its reads), so the reader's fields are its
// own; charge takes mu.
func (c *limitedConn) settle() {
	if c.ran == 0 || c.inlineTo > c.from {
		return // nothing run; or an inline command, whose Raw is not its bytes
	}
	pending := int64(c.w - c.r)
	if c.held-c.ran < pending+c.cur {
		return // cannot be: those commands came out of held
	}
	c.held -= c.ran
	c.ran = 0
	c.charge()
	if len(c.buf) > 4*readChunk && 4*int(pending) <= len(c.buf) {
		// buf[:r] was handed on (redcon has its own copy): keep only
		// buf[r:w], in a buffer of its size.
		var nb []byte
		if pending > 0 {
			nb = make([]byte, int(pending)+readChunk)
			copy(nb, c.buf[c.r:c.w])
		}
		c.buf = nb
		c.ready -= c.r
		c.w -= c.r
		c.r = 0
	}
}

// charge brings what the connection has taken of the server's budget to
// what it holds past freeBytes: it gives back what it holds no more, and
// says false when the budget cannot take what it holds more (then it
// takes nothing: the connection is refused and closed).
func (c *limitedConn) charge() bool {
	if c.inflight == nil {
		return true
	}
	want := max(0, c.held-freeBytes)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return true // given back already; the reads fail from now on
	}
	if want < c.charged {
		c.inflight.give(c.charged - want)
	} else if !c.inflight.take(want - c.charged) {
		return false
	}
	c.charged = want
	return true
}

// Close gives back what the connection has taken of the server's budget,
// whatever its state (a command unfinished, or handed on and not run),
// then closes it.
func (c *limitedConn) Close() error {
	c.mu.Lock()
	if !c.gone {
		c.gone = true
		c.inflight.give(c.charged)
		c.charged = 0
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

// limit is the most bytes an unfinished command may hold now.
func (c *limitedConn) limit() int64 {
	if c.authed.Load() {
		return c.max
	}
	if c.max <= 0 {
		return preAuthMax
	}
	return min(c.max, preAuthMax)
}

// room makes readChunk bytes of room after buf[w]: it moves the
// unfinished command to the front when that frees at least as much as it
// copies, else moves it into a buffer twice as large, so that each byte
// is copied a bounded number of times however the command arrives.
func (c *limitedConn) room() {
	pending := c.w - c.r
	if c.r >= pending && c.r >= readChunk {
		copy(c.buf, c.buf[c.r:c.w])
	} else {
		nb := make([]byte, max(2*len(c.buf), pending+readChunk))
		copy(nb, c.buf[c.r:c.w])
		c.buf = nb
	}
	c.ready -= c.r
	c.w -= c.r
	c.r = 0
}

// refuse answers the refused frame with a protocol error, as Redis does
// (or -UNAVAILABLE when the budget refused it: the rest of the frame
// cannot be skipped safely), and returns the error that ends the
// connection.
func (c *limitedConn) refuse() error {
	if c.refused == errBusy {
		_, _ = c.Conn.Write([]byte("-" + Prefix(apierr.Unavailable) + " " + errBusy.Error() + "\r\n"))
		return c.refused
	}
	_, _ = c.Conn.Write([]byte("-ERR Protocol error: " + c.refused.Error() + "\r\n"))
	return c.refused
}

// Write writes b, or nothing when b is empty: redcon flushes its buffer
// after every batch of commands, whether they wrote or not, and an empty
// write is still a system call (a blocked WQ.RESERVE made two per reply).
func (c *limitedConn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	return c.Conn.Write(b)
}
