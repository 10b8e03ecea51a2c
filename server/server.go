// Package server is the wheelq server: a started wheelq process on a
// namespace that any service, in any language, schedules to, cancels
// through and pulls from over HTTP, and that pushes the due jobs of chosen
// topics to HTTP endpoints. N servers on one namespace are the team the
// library already supports: kill one, the others carry on.
//
// It is thin: package httpapi maps HTTP to the library's public API,
// package auth decides who may do what, package push delivers, package
// config reads the configuration. Run it with cmd/wheelq-server; see
// docs/server.md.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
	wheelqprom "github.com/wheelq/wheelq/contrib/prometheus"
	"github.com/wheelq/wheelq/dashboard"
	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/config"
	"github.com/wheelq/wheelq/server/httpapi"
	"github.com/wheelq/wheelq/server/push"
	"github.com/wheelq/wheelq/server/resp"
	"github.com/wheelq/wheelq/wheel"
)

// ErrConfig is a configuration the server refuses to run with.
var ErrConfig = errors.New("server: refused configuration")

// Options are what the server takes besides its configuration.
type Options struct {
	// ConfigPath is the file Reload reads the tokens from again ("" if
	// none); Environ and Flags the overrides laid over it (config.Load's).
	ConfigPath string
	Environ    []string
	Flags      map[string]string
	// Dev runs on an in-process Redis (miniredis) that keeps nothing: for
	// a first try only.
	Dev bool
	// Logger gets the server's log; default: to stderr as the config says.
	Logger *slog.Logger
	// Listening, if set, is told the HTTP address once it listens;
	// ListeningRESP the RESP one.
	Listening     func(addr string)
	ListeningRESP func(addr string)
}

// Server is one wheelq server process.
type Server struct {
	cfg  config.Config
	opts Options
	log  *slog.Logger

	rdb  redis.UniversalClient
	mini *miniredis.Miniredis
	q    *wheelq.Queue
	api  *httpapi.API
	reg  *prometheus.Registry
	cert atomic.Pointer[tls.Certificate]
	hsrv *http.Server
	resp *resp.Server // nil unless resp.addr is set
	// pushes are the deliverers of pushed topics, closed after the queue.
	pushes []*push.Deliverer
}

// New checks cfg and builds the server; Run starts it.
func New(cfg config.Config, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, opts: opts, log: opts.Logger}
	if s.log == nil {
		s.log = NewLogger(os.Stderr, cfg.Log)
	}
	az, n, err := s.authorizer(cfg)
	if err != nil {
		return nil, err
	}
	if !cfg.Loopback() && n == 0 {
		return nil, fmt.Errorf("%w: http.addr %s is reachable from other hosts and no token is configured: add [[token]] entries or token_file (wheelq-server token -id NAME makes one)", ErrConfig, cfg.HTTP.Addr)
	}
	if cfg.HTTP.TLSCert != "" {
		if err := s.loadCert(); err != nil {
			return nil, err
		}
	}
	if err := s.connect(); err != nil {
		return nil, err
	}
	m := wheelqprom.New(wheelqprom.Options{})
	q, err := wheelq.New(s.rdb, wheelq.Config{
		Namespace: cfg.Queue.Namespace, Partitions: cfg.Queue.Partitions, Concurrency: cfg.Queue.Concurrency,
		MaxAttempts: cfg.Queue.MaxAttempts, MaxPayload: cfg.Queue.MaxPayload, InstanceID: cfg.Queue.InstanceID,
		LockDir: cfg.Queue.LockDir, Logger: s.log, Observer: m,
		ReplicaAcks: cfg.Redis.ReplicaAcks, ReplicaTimeout: cfg.Redis.ReplicaTimeout.D(),
		// A started server runs every job of the namespace it fires: one of
		// a topic neither pulled nor pushed could only be dead-lettered.
		RefuseUnhandled: cfg.Queue.Start,
	})
	if err != nil {
		s.closeRedis()
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	s.q = q
	m.Watch(q)
	s.reg = prometheus.NewRegistry()
	// With the Go runtime's and the process's own (heap, collections,
	// goroutines, CPU, memory, files), as an operator of a Go server
	// expects beside the queue's.
	s.reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if len(cfg.Queue.Pull) > 0 {
		if err := q.Pull(cfg.Queue.Pull...); err != nil {
			s.closeRedis()
			return nil, fmt.Errorf("%w: queue.pull: %w", ErrConfig, err)
		}
	}
	for i, pt := range cfg.Push.Topics {
		u, _ := url.Parse(pt.URL.Reveal())
		to := pt.Timeout.D()
		if to == 0 {
			to = cfg.Push.Timeout.D()
		}
		t := push.Target{URL: u, Secret: pt.Secret.Reveal(), Timeout: to}
		if pt.RetryBase > 0 {
			t.Backoff = push.Exponential(pt.RetryBase.D(), pt.RetryMax.D())
		}
		d, err := push.New(t, cfg.Push.AllowHosts)
		if err == nil {
			s.pushes = append(s.pushes, d)
			err = q.Handle(pt.Topic, d)
		}
		if l := (wheelq.Limit{Concurrency: pt.Concurrency, GlobalConcurrency: pt.GlobalConcurrency, Rate: pt.Rate, Per: pt.Per.D()}); err == nil && l != (wheelq.Limit{}) {
			err = q.Limit(pt.Topic, l)
		}
		if err != nil {
			s.closeRedis()
			return nil, fmt.Errorf("%w: push.topic[%d]: %w", ErrConfig, i, err)
		}
	}
	s.api = httpapi.New(q, az, httpapi.Options{
		MaxBody: cfg.HTTP.MaxBody, MaxBatchBody: cfg.HTTP.MaxBatchBody, MaxInflightBody: cfg.HTTP.MaxInflightBody, MaxBatch: cfg.HTTP.MaxBatch,
		MaxWait: cfg.HTTP.MaxWait.D(), MaxPollsPerToken: cfg.HTTP.MaxPollsPerToken,
		Logger: s.log, Access: cfg.Log.Access, Ready: s.ready,
	})
	if cfg.RESP.Addr != "" {
		s.resp = resp.New(q, s.api.Authorizer, resp.Options{MaxConns: cfg.RESP.MaxConns, IdleTimeout: cfg.RESP.IdleTimeout.D(),
			MaxCommandBytes: cfg.RESP.MaxCommandBytes, MaxInflightBytes: cfg.RESP.MaxInflightBytes, MaxBlock: cfg.RESP.MaxBlock.D(), DelayedQueue: cfg.RESP.DelayedQueue, Logger: s.log})
	}
	return s, nil
}

// NewLogger makes the server's logger as cfg says.
func NewLogger(w io.Writer, cfg config.Log) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Level))
	ho := &slog.HandlerOptions{Level: lvl}
	if cfg.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// authorizer builds the authorizer of cfg's tokens, and says how many
// there are.
func (s *Server) authorizer(cfg config.Config) (*auth.Authorizer, int, error) {
	var es []auth.Entry
	for _, t := range cfg.Tokens {
		es = append(es, auth.Entry{ID: t.ID, SHA256: t.SHA256, Perms: [3][]string{t.Produce, t.Consume, t.Admin}})
	}
	if cfg.TokenFile != "" {
		more, err := auth.LoadFile(cfg.TokenFile)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: token_file: %w", ErrConfig, err)
		}
		es = append(es, more...)
	}
	az, err := auth.New(es, cfg.Loopback())
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return az, len(es), nil
}

func (s *Server) loadCert() error {
	c, err := tls.LoadX509KeyPair(s.cfg.HTTP.TLSCert, s.cfg.HTTP.TLSKey)
	if err != nil {
		return fmt.Errorf("%w: http.tls_cert/tls_key: %w", ErrConfig, err)
	}
	s.cert.Store(&c)
	return nil
}

func (s *Server) connect() error {
	rc := s.cfg.Redis
	if s.opts.Dev {
		m, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("server: -dev: %w", err)
		}
		s.mini = m
		s.rdb = redis.NewClient(&redis.Options{Addr: m.Addr()})
		return nil
	}
	switch {
	case len(rc.Addrs) == 0 && rc.URL == "":
		return fmt.Errorf("%w: no Redis given: set redis.url (or redis.addrs), -redis-url or $WHEELQ_SERVER_REDIS_URL; or try it with -dev (in-process, keeps nothing)", ErrConfig)
	case len(rc.Addrs) > 0 && rc.SentinelMaster != "":
		s.rdb = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: rc.SentinelMaster, SentinelAddrs: rc.Addrs, Password: rc.Password.Reveal()})
	case len(rc.Addrs) > 0 && rc.Cluster:
		s.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs, Password: rc.Password.Reveal()})
	case len(rc.Addrs) > 0:
		s.rdb = redis.NewClient(&redis.Options{Addr: rc.Addrs[0], Password: rc.Password.Reveal()})
	default:
		o, err := redis.ParseURL(rc.URL.Reveal())
		if err != nil {
			return fmt.Errorf("%w: redis.url: %v", ErrConfig, err)
		}
		if rc.Password != "" {
			o.Password = rc.Password.Reveal()
		}
		s.rdb = redis.NewClient(o)
	}
	return nil
}

func (s *Server) closeRedis() {
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	if s.mini != nil {
		s.mini.Close()
	}
}

// Queue is the server's queue.
func (s *Server) Queue() *wheelq.Queue { return s.q }

// ready is /readyz's check.
func (s *Server) ready(ctx context.Context) string {
	if s.cfg.Queue.Start {
		select {
		case <-s.q.Ready():
		default:
			return "loading the partitions' jobs"
		}
	}
	// The queue's Ping, not the client's: one that gets an answer also
	// reopens the queue's writes, which fail fast while Redis is taken to
	// be unreachable, so that a server said ready takes writes.
	if err := s.q.Ping(ctx); err != nil {
		// The detail (an address, a dial error) goes to the log: the
		// probe needs no token.
		if errors.Is(err, wheelq.ErrNotReplicated) {
			s.log.Warn("wheelq server: not ready: writes wait for replicas that do not acknowledge (redis.replica_acks); every write fails until they do", "err", err)
			return "redis replicas not acknowledging writes"
		}
		s.log.Warn("wheelq server: not ready: redis unreachable", "err", err)
		return "redis unreachable"
	}
	return ""
}

// Handler is the server's whole HTTP handler: the API, /metrics and the
// dashboard under /ui/. A path not in canonical form (//v1/jobs,
// /ui/../metrics) is answered a JSON 404, no_route, on any prefix
// (httpapi.API.Canonical).
func (s *Server) Handler() (http.Handler, error) {
	mux := http.NewServeMux()
	mux.Handle("/", s.api)
	if s.cfg.HTTP.Metrics {
		metrics := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
		mux.Handle("GET /metrics", s.api.Logged("GET /metrics", s.authenticated(auth.Admin, metrics)))
	}
	if s.cfg.HTTP.UI {
		dash, err := dashboard.New(s.q, dashboard.Options{Title: "wheelq server", Authorize: s.authorizeUI, ReadOnly: s.cfg.HTTP.UIReadOnly})
		if err != nil {
			return nil, err
		}
		mux.Handle("/ui/", s.api.Logged("/ui/", s.challenge(http.StripPrefix("/ui", dash))))
	}
	// A path not in canonical form gets the API's JSON 404 on every
	// prefix, not the mux's redirect.
	return s.api.Canonical(mux), nil
}

// authenticated lets through requests whose token has perm on every
// topic.
func (s *Server) authenticated(perm auth.Perm, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.api.Authorizer().Authenticate(httpapi.Bearer(r))
		if err == nil {
			httpapi.SetWho(r, p.ID)
			err = p.Allow(perm, "")
		}
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="wheelq"`)
			s.api.WriteError(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// challenge asks a browser for credentials (Basic: any user name, the
// token as the password) when the dashboard needs a token and the
// request has none, or one that is no token (mistyped, revoked): a
// browser asks its user again only after a 401 with a challenge.
func (s *Server) challenge(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if az := s.api.Authorizer(); !az.Open() {
			msg := "a token is needed: give it as the password"
			tok := httpapi.Bearer(r)
			_, err := az.Authenticate(tok)
			if tok != "" && err != nil {
				msg = fmt.Sprintf("%v: give a token as the password", err)
			}
			if tok == "" || err != nil {
				w.Header().Set("WWW-Authenticate", `Basic realm="wheelq dashboard (password: a token)"`)
				s.api.WriteError(w, r, apierr.New(apierr.Unauthorized, "%s", msg))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// authorizeUI is the dashboard's Authorize hook: a job's view needs any
// permission on its topic, the other views (lists, counts) and the
// actions admin (on every topic for the namespace's page), as the API's
// routes for the same.
func (s *Server) authorizeUI(r *http.Request, a dashboard.Action) error {
	p, err := s.api.Authorizer().Authenticate(httpapi.Bearer(r))
	if err != nil {
		return err
	}
	httpapi.SetWho(r, p.ID)
	if a.Kind == dashboard.KindView {
		if a.ID != "" {
			// One job, as GET /v1/jobs/{topic}/{id}.
			return p.AllowAny(a.Topic, auth.Produce, auth.Consume, auth.Admin)
		}
		// The page, lists, counts and timelines, as GET /v1/jobs and
		// /v1/counts (every topic for the namespace's page).
		return p.Allow(auth.Admin, a.Topic)
	}
	return p.Allow(auth.Admin, a.Topic)
}

// Reload reads the tokens (the config file's and token_file) and the TLS
// certificate again, as on SIGHUP. On any error it keeps what it had and
// says why. Other keys need a restart.
func (s *Server) Reload() error {
	cfg := s.cfg
	if s.opts.ConfigPath != "" {
		c, err := config.Load(s.opts.ConfigPath, s.opts.Environ, s.opts.Flags)
		if err != nil {
			return err
		}
		cfg.Tokens, cfg.TokenFile = c.Tokens, c.TokenFile
		cfg.HTTP.TLSCert, cfg.HTTP.TLSKey = c.HTTP.TLSCert, c.HTTP.TLSKey
	}
	az, n, err := s.authorizer(cfg)
	if err != nil {
		return err
	}
	if !cfg.Loopback() && n == 0 {
		return fmt.Errorf("%w: a reload would leave a non-loopback server without tokens", ErrConfig)
	}
	if n == 0 && !s.api.Authorizer().Open() {
		// A server that checks tokens does not become open to anyone on
		// loopback because a token file was emptied (a deploy half done).
		return fmt.Errorf("%w: a reload would leave the server without tokens, open to anyone who reaches it; restart it to run without tokens", ErrConfig)
	}
	if cfg.HTTP.TLSCert != "" && s.cert.Load() != nil {
		c, err := tls.LoadX509KeyPair(cfg.HTTP.TLSCert, cfg.HTTP.TLSKey)
		if err != nil {
			return fmt.Errorf("%w: http.tls_cert/tls_key: %w", ErrConfig, err)
		}
		s.cert.Store(&c)
	}
	s.api.SetAuthorizer(az)
	if s.resp != nil {
		s.resp.Reauth() // blocked WQ.RESERVEs check their tokens again
	}
	s.cfg.Tokens, s.cfg.TokenFile = cfg.Tokens, cfg.TokenFile
	return nil
}

// Run starts the queue, listens and serves until ctx ends; then it stops
// gracefully: no new connections, open long polls answered (empty), in
// flight requests and push deliveries waited for up to
// http.shutdown_timeout, partitions handed over. Pushes still running
// then are cut off, with a warning, and delivered again later (by another
// server, or this one restarted): that alone is no error.
func (s *Server) Run(ctx context.Context) error {
	defer s.closeRedis()
	if s.opts.Dev {
		s.log.Warn("wheelq server: -dev: running on an in-process Redis that keeps NOTHING: every job is lost when this process stops; for a first try only")
	}
	if d := s.cfg.Process.SchedSlice.D(); d != 0 {
		if err := wheel.SetSchedSlice(d); err != nil {
			// Not fatal: the server runs as well, only without it.
			s.log.Warn("wheelq server: process.sched_slice not applied; the kernel's default slice stays", "err", err)
		} else {
			s.log.Info("wheelq server: every thread runs with a time slice of "+d.String(), "process.sched_slice", d.String())
		}
	}
	h, err := s.Handler()
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", s.cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("server: listen on %s: %w", s.cfg.HTTP.Addr, err)
	}
	if s.cfg.Queue.Start {
		if err := s.q.Start(ctx); err != nil {
			_ = l.Close()
			return fmt.Errorf("server: start the queue: %w", err)
		}
	}
	c := s.cfg.HTTP
	s.hsrv = &http.Server{
		// Heads past max_header_bytes get the API's JSON error
		// (HeaderLimit); net/http's own plain-text refusal is left for
		// those past twice that, a hard cap on what is read.
		Handler: s.api.HeaderLimit(c.MaxHeaderBytes, h), ReadTimeout: c.ReadTimeout.D(), ReadHeaderTimeout: c.ReadHeaderTimeout.D(),
		WriteTimeout: c.WriteTimeout.D(), IdleTimeout: c.IdleTimeout.D(), MaxHeaderBytes: 2 * c.MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	scheme := "http"
	var respTLS *tls.Config
	if s.cert.Load() != nil {
		scheme = "https"
		s.hsrv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.cert.Load(), nil }}
		// Cloned before Serve, which adds HTTP's protocols to its own.
		respTLS = s.hsrv.TLSConfig.Clone()
		l = tls.NewListener(l, s.hsrv.TLSConfig)
	}
	s.log.Info("wheelq server: listening", "addr", scheme+"://"+l.Addr().String(), "namespace", s.cfg.Queue.Namespace,
		"started", s.cfg.Queue.Start, "pull", s.cfg.Queue.Pull, "push", len(s.cfg.Push.Topics), "tokens", !s.api.Authorizer().Open())
	if s.opts.Listening != nil {
		s.opts.Listening(l.Addr().String())
	}
	served := make(chan error, 2)
	go func() { served <- s.hsrv.Serve(l) }()
	if s.resp != nil {
		rl, err := net.Listen("tcp", s.cfg.RESP.Addr)
		if err != nil {
			return errors.Join(fmt.Errorf("server: listen on %s (resp.addr): %w", s.cfg.RESP.Addr, err), s.stop())
		}
		if respTLS != nil {
			rl = tls.NewListener(rl, respTLS)
		}
		s.log.Info("wheelq server: RESP listening", "addr", rl.Addr().String())
		if s.opts.ListeningRESP != nil {
			s.opts.ListeningRESP(rl.Addr().String())
		}
		go func() {
			if err := s.resp.Serve(rl); err != nil {
				served <- fmt.Errorf("server: resp: %w", err)
			}
		}()
	}
	select {
	case err = <-served:
	case <-ctx.Done():
	}
	return errors.Join(err, s.stop())
}

// cutOff says whether err, the queue's Shutdown's, says only that its
// context ended (the stop's bound) while handlers ran, which it cut off:
// the context's error, and a wheelq.StuckRunsError naming those that had
// not yet returned. Their jobs run again (an outcome stored in time is a
// failed attempt, retried; one dropped leaves the job pending).
func cutOff(err error) bool {
	if !errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var stuck *wheelq.StuckRunsError
		if !errors.Is(e, context.DeadlineExceeded) && !errors.As(e, &stuck) {
			return false // something else failed too: said as an error
		}
	}
	return true
}

// countedEnd is a context that ends when parent does, with parent's
// error, but only once count has run: what was running when the bound
// passed is counted before anything is told to stop. It has no deadline
// of its own (the parent's would end contexts derived from it first).
type countedEnd struct {
	context.Context
	done chan struct{}
	err  error // written before done is closed
}

func newCountedEnd(parent context.Context, count func()) (*countedEnd, func() bool) {
	c := &countedEnd{Context: context.WithoutCancel(parent), done: make(chan struct{})}
	stop := context.AfterFunc(parent, func() {
		count()
		c.err = parent.Err()
		close(c.done)
	})
	return c, stop
}

// Deadline says there is none: the end comes by Done.
func (c *countedEnd) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is closed once parent ended and the count was taken.
func (c *countedEnd) Done() <-chan struct{} { return c.done }

// Err is parent's error once Done is closed.
func (c *countedEnd) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// stop is the graceful stop.
func (s *Server) stop() error {
	s.log.Info("wheelq server: stopping")
	bound := s.cfg.HTTP.ShutdownTimeout.D()
	sctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	s.api.CloseWaits()
	var rerr error
	if s.resp != nil {
		// Blocked reserves answer, new commands get -UNAVAILABLE, the
		// ones under way finish and are answered; then connections close.
		if err := s.resp.Shutdown(sctx); err != nil {
			rerr = fmt.Errorf("server: resp shutdown: %w", err)
		}
	}
	herr := s.hsrv.Shutdown(sctx)
	if herr != nil {
		herr = fmt.Errorf("server: http shutdown: %w", herr)
		_ = s.hsrv.Close()
	}
	// After the requests: acks and nacks of open requests went through.
	// The pushes running when the bound passes are counted before the
	// queue cuts them off.
	var pushing int
	qctx, stopCount := newCountedEnd(sctx, func() {
		for _, d := range s.pushes {
			pushing += d.Running()
		}
	})
	qerr := s.q.Shutdown(qctx)
	stopCount()
	// qctx.Err, not stopCount's answer: once it is set, the count is.
	if qctx.Err() != nil && pushing > 0 && cutOff(qerr) {
		// Not a failure of the stop: the bound the operator set was kept,
		// and nothing is lost. A push cut off is a failed attempt, retried
		// (if its outcome was stored in time), or its outcome is dropped
		// and its job stays pending, claimed by no one once the leases
		// are released: either way another server, or this one restarted,
		// pushes it again (at-least-once; the receiver may see a push
		// twice, with the same webhook-id).
		s.log.Warn(fmt.Sprintf("wheelq server: shutdown_timeout passed with %d push(es) running: cut off; each will be delivered again, by another server or by this one restarted", pushing),
			"http.shutdown_timeout", bound.String(), "runs", qerr.Error())
		qerr = nil
	}
	if qerr != nil {
		qerr = fmt.Errorf("server: queue shutdown: %w", qerr)
	}
	for _, d := range s.pushes {
		d.Close()
	}
	s.log.Info("wheelq server: stopped")
	return errors.Join(rerr, herr, qerr)
}
