// Package httpapi is the wheelq server's HTTP/JSON API under /v1: a thin
// layer over the library's public API (schedule, get, cancel, reschedule,
// reserve, ack, nack, touch, list, counts, pause, resume, dead jobs,
// requeue). Every route is in one table (Routes), which the OpenAPI
// document (openapi.json, served at /v1/openapi.json) is checked against.
// Every error is JSON, {"error": {"code", "message"}}, with a code from
// package apierr and its HTTP status.
package httpapi

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/internal/errmap"
)

//go:embed openapi.json
var openAPI []byte

// OpenAPI is the API's OpenAPI 3.1 document.
func OpenAPI() []byte { return openAPI }

// Options configures the API.
type Options struct {
	// MaxBody bounds a request's body; MaxBatchBody a batch's. Bodies
	// past them are refused (413, too_large) without being read whole.
	MaxBody, MaxBatchBody int64
	// MaxBatch is the most jobs in one batch.
	MaxBatch int
	// MaxInflightBody bounds the bytes of request bodies the API holds at
	// once, counted from the moment a body is read until its reply begins
	// (the handler is done with it: a reply past net/http's buffer
	// reaches the client before the handler returns, and the client's
	// next request must find the bytes free); a body of unknown length
	// counts as its limit. A request past it is answered 503 unavailable
	// with Retry-After, unread, rather than the server running out of
	// memory under many large batches at once. 0: no bound.
	MaxInflightBody int64
	// MaxWait bounds a reserve's wait_ms.
	MaxWait time.Duration
	// MaxPollsPerToken caps the long polls one token holds at once.
	MaxPollsPerToken int
	// Timeout bounds the queue calls of a request that does not wait.
	// Default 10s.
	Timeout time.Duration
	// Logger gets the access log (if Access) and internal errors.
	Logger *slog.Logger
	Access bool
	// Ready, if set, says why the server is not ready ("" when it is):
	// /readyz's check.
	Ready func(ctx context.Context) string
}

// API serves the HTTP API.
type API struct {
	q    *wheelq.Queue
	opts Options
	auth atomic.Pointer[auth.Authorizer]
	mux  *http.ServeMux

	// waitCtx is cancelled by CloseWaits: open long polls then answer
	// at once with what they have (nothing).
	waitCtx    context.Context
	closeWaits context.CancelFunc

	inflight atomic.Int64 // bytes of bodies held now (Options.MaxInflightBody)

	// crossOrigin refuses a browser's cross-origin request that changes
	// something (not GET, HEAD or OPTIONS), as the browser says it is
	// (Sec-Fetch-Site, or else an Origin other than the request's host); a
	// client that is not a browser sends neither and passes. A server
	// without tokens serves anyone on loopback, and a web page open in a
	// browser there could otherwise send it a "simple" POST (text/plain,
	// sent without a preflight): schedule, cancel, reserve, pause. With
	// tokens a browser has none to send (the dashboard's Basic credentials
	// cover /ui/ only, which checks for itself). Not changed after New.
	crossOrigin *http.CrossOriginProtection

	mu      sync.Mutex
	waiters map[string]int // long polls open, per principal id
	// reauth is cancelled (and replaced) by SetAuthorizer: open long polls
	// and streams stop waiting, and hand out nothing more to a token the
	// new authorizer refuses. Guarded by mu.
	reauth       context.Context
	reauthCancel context.CancelFunc
}

// Route is one route of the API.
type Route struct {
	// Pattern is the http.ServeMux pattern: "METHOD /path/{wildcard}",
	// written as OpenAPI writes paths.
	Pattern string
	// Operation is the OpenAPI operationId.
	Operation string
	h         func(a *API, w http.ResponseWriter, r *http.Request, p *auth.Principal) (int, any, error)
	// public routes need no token.
	public bool
}

// read says whether the route changes nothing: its method is GET (safe,
// RFC 9110), so its errors are mapped by errmap.FromRead (a timeout is
// unavailable, not outcome_unknown).
func (rt Route) read() bool { return strings.HasPrefix(rt.Pattern, http.MethodGet+" ") }

// Routes lists the API's routes.
func Routes() []Route {
	return []Route{
		{Pattern: "POST /v1/jobs/{topic}", Operation: "schedule", h: (*API).schedule},
		{Pattern: "POST /v1/batch", Operation: "scheduleBatch", h: (*API).batch},
		{Pattern: "GET /v1/jobs/{topic}/{id}", Operation: "getJob", h: (*API).get},
		{Pattern: "DELETE /v1/jobs/{topic}/{id}", Operation: "cancelJob", h: (*API).cancel},
		{Pattern: "POST /v1/jobs/{topic}/{id}/reschedule", Operation: "rescheduleJob", h: (*API).reschedule},
		{Pattern: "POST /v1/jobs/{topic}/{id}/requeue", Operation: "requeueJob", h: (*API).requeue},
		{Pattern: "POST /v1/jobs/{topic}/{id}/ack", Operation: "ackJob", h: (*API).ack},
		{Pattern: "POST /v1/ack", Operation: "ackBatch", h: (*API).ackBatch},
		{Pattern: "POST /v1/jobs/{topic}/{id}/nack", Operation: "nackJob", h: (*API).nack},
		{Pattern: "POST /v1/jobs/{topic}/{id}/touch", Operation: "touchJob", h: (*API).touch},
		{Pattern: "POST /v1/reserve", Operation: "reserve", h: (*API).reserve},
		{Pattern: "POST /v1/reserve/stream", Operation: "reserveStream", h: (*API).reserveStream},
		{Pattern: "GET /v1/jobs", Operation: "listJobs", h: (*API).list},
		{Pattern: "GET /v1/dead", Operation: "listDead", h: (*API).dead},
		{Pattern: "GET /v1/counts", Operation: "counts", h: (*API).counts},
		{Pattern: "POST /v1/topics/{topic}/pause", Operation: "pauseTopic", h: (*API).pause},
		{Pattern: "POST /v1/topics/{topic}/resume", Operation: "resumeTopic", h: (*API).resume},
		{Pattern: "POST /v1/cancel", Operation: "cancelBatch", h: (*API).cancelBatch},
		{Pattern: "GET /v1/recurring", Operation: "listRecurring", h: (*API).listRecurring},
		{Pattern: "PUT /v1/recurring/{name}", Operation: "declareRecurring", h: (*API).putRecurring},
		{Pattern: "DELETE /v1/recurring/{name}", Operation: "removeRecurring", h: (*API).deleteRecurring},
		{Pattern: "GET /v1/openapi.json", Operation: "openapi", h: (*API).openapi, public: true},
		{Pattern: "GET /healthz", Operation: "healthz", h: (*API).healthz, public: true},
		{Pattern: "GET /readyz", Operation: "readyz", h: (*API).readyz, public: true},
	}
}

// New builds the API over q (started, if it serves reserve) with the
// authorizer az.
func New(q *wheelq.Queue, az *auth.Authorizer, opts Options) *API {
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	a := &API{q: q, opts: opts, waiters: map[string]int{}, crossOrigin: http.NewCrossOriginProtection()}
	a.auth.Store(az)
	a.waitCtx, a.closeWaits = context.WithCancel(context.Background())
	a.reauth, a.reauthCancel = context.WithCancel(context.Background())
	a.mux = http.NewServeMux()
	for _, rt := range Routes() {
		a.mux.Handle(rt.Pattern, a.endpoint(rt))
	}
	return a
}

// SetAuthorizer swaps the authorizer (a reload of the tokens). Open long
// polls and streams look again: one whose token the new authorizer
// refuses (or no longer lets consume its topics) ends with 401 or 403,
// handing back what it had reserved; the others end as a wait does.
func (a *API) SetAuthorizer(az *auth.Authorizer) {
	a.auth.Store(az)
	a.mu.Lock()
	old := a.reauthCancel
	a.reauth, a.reauthCancel = context.WithCancel(context.Background())
	a.mu.Unlock()
	old()
}

// Authorizer is the current authorizer.
func (a *API) Authorizer() *auth.Authorizer { return a.auth.Load() }

// CloseWaits makes every open long poll answer now, with no jobs, and
// every later one answer at once: the first step of a graceful stop.
func (a *API) CloseWaits() { a.closeWaits() }

// ServeHTTP serves the API's routes; any other path is a JSON 404
// (no_route), a path not in canonical form too (see Canonical), and a
// known path with another method a JSON 405.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.uncanonical(w, r) || a.elsewhere(w, r) {
		return
	}
	h, pattern := a.mux.Handler(r)
	if pattern == "" {
		// The mux's own 404 or 405: said in JSON.
		start, sw := time.Now(), &statusWriter{ResponseWriter: w}
		if a.opts.Access {
			defer a.access(r, "-", sw, start, "-")
		}
		rec := &statusOnly{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			sw.Header().Set("Allow", rec.header.Get("Allow"))
			a.writeErr(sw, r, apierr.New(apierr.MethodNotAllow, "%s is not allowed on %s", r.Method, r.URL.Path))
			return
		}
		a.writeErr(sw, r, apierr.New(apierr.NoRoute, "no route %s %s", r.Method, r.URL.Path))
		return
	}
	a.mux.ServeHTTP(w, r) // which sets the path's values
}

// Canonical answers a request whose path is not in canonical form (an
// empty, "." or ".." segment: //v1/jobs, /v1/jobs/./x, /v1/../v1/jobs)
// with the API's JSON 404, no_route, naming the path it may have meant;
// the others go to h. net/http's ServeMux would redirect such a request
// to the cleaned path, with an HTML body: API clients read JSON errors
// and follow no redirect of a POST, and a path a proxy or a client
// joined wrongly is better said than guessed at. Escaped dots (%2E) are
// not segments: they reach the route as an id's characters. A server
// without tokens also answers a request addressed to another host name
// than a loopback one with forbidden (see the API's ServeHTTP, which
// checks both for its own routes). The server's whole handler (the API,
// /metrics, /ui/) is wrapped in it.
func (a *API) Canonical(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.uncanonical(w, r) && !a.elsewhere(w, r) {
			h.ServeHTTP(w, r)
		}
	})
}

// elsewhere answers r (forbidden) if the server has no tokens and r is
// addressed to a host name that is not a loopback one (localhost, a name
// under .localhost) or an IP address, and says whether it did. A web
// page can make its own name resolve to 127.0.0.1 (DNS rebinding): its
// requests are then same-origin for the browser, which lets the page
// read the replies (jobs, payloads) and write as it likes; only the Host
// header tells them apart. /healthz and /readyz, which tell nothing of
// any job, answer every name. With tokens the server may be reached by
// any name.
func (a *API) elsewhere(w http.ResponseWriter, r *http.Request) bool {
	if !a.auth.Load().Open() || loopbackName(r.Host) {
		return false
	}
	if p := r.URL.Path; p == "/healthz" || p == "/readyz" {
		return false
	}
	sw := &statusWriter{ResponseWriter: w}
	if a.opts.Access {
		defer a.access(r, "-", sw, time.Now(), "-")
	}
	a.writeErr(sw, r, apierr.New(apierr.Forbidden, "request addressed to host %q: a server without tokens answers only localhost, names under .localhost and IP addresses (a page of another site could rebind its name to this one); give the server tokens to reach it by another name",
		r.Host))
	return true
}

// loopbackName says whether host (a Host header: a name or an address,
// with or without a port) is an IP address, localhost or a name under
// .localhost (which resolve to loopback only: RFC 6761).
func loopbackName(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return true
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// uncanonical answers r (no_route) if its path is not in canonical form,
// as net/http's ServeMux judges it (CONNECT requests aside, which it does
// not clean), and says whether it did.
func (a *API) uncanonical(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.EscapedPath()
	clean := cleanPath(p)
	if r.Method == http.MethodConnect || clean == p {
		return false
	}
	sw := &statusWriter{ResponseWriter: w}
	if a.opts.Access {
		defer a.access(r, "-", sw, time.Now(), "-")
	}
	a.writeErr(sw, r, apierr.New(apierr.NoRoute, "no route %s %s: the path is not in canonical form (an empty, '.' or '..' segment); the route may be %s",
		r.Method, p, clean))
	return true
}

// cleanPath is the canonical form of the URL path p as net/http's
// ServeMux makes it: rooted, without empty, "." or ".." segments, a
// trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// Logged puts the requests h serves (the server's paths outside the API:
// /metrics, /ui/) in the access log, under route, when Options.Access.
func (a *API) Logged(route string, h http.Handler) http.Handler {
	if !a.opts.Access {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start, sw := time.Now(), &statusWriter{ResponseWriter: w}
		who := "-"
		defer func() { a.access(r, route, sw, start, who) }()
		h.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), whoKey{}, &who)))
	})
}

// heldKey is the context key of the body bytes a request holds of
// Options.MaxInflightBody (given back by endpoint when its reply begins,
// see statusWriter.replying).
type heldKey struct{}

// whoKey is the context key of the access log's token id of a request
// served through Logged.
type whoKey struct{}

// SetWho records the id of the token a request served through Logged
// authenticated with, for its access log line (else "-").
func SetWho(r *http.Request, id string) {
	if who, ok := r.Context().Value(whoKey{}).(*string); ok {
		*who = id
	}
}

// HeaderLimit refuses, with a JSON 431 and the too_large code, a request
// whose head (request line and headers) is past most bytes, before h
// sees it. net/http refuses heads past http.Server.MaxHeaderBytes itself,
// with a plain-text 431 and no code: the server sets that higher (a hard
// cap on what is read), so that a head past the configured limit gets
// the API's error like any other bad input.
func (a *API) HeaderLimit(most int, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := headBytes(r); n > most {
			sw := &statusWriter{ResponseWriter: w}
			if a.opts.Access {
				defer a.access(r, "-", sw, time.Now(), "-")
			}
			writeJSON(sw, http.StatusRequestHeaderFieldsTooLarge, ErrorResponse{Error: *apierr.New(apierr.TooLarge,
				"request head of about %d bytes: the limit is %d (http.max_header_bytes)", n, most)})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// headBytes is about the size of r's head as sent: the request line, the
// Host header and every other, each with its ": " and CRLF.
func headBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4 + len("Host: \r\n") + len(r.Host)
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// access writes r's line of the access log: what was asked, the route
// that served it, the reply's status and size, how long it took, and the
// token's id ("-": none, or not looked at).
func (a *API) access(r *http.Request, route string, sw *statusWriter, start time.Time, who string) {
	a.opts.Logger.Info("http", "method", r.Method, "path", r.URL.Path, "route", route, "status", sw.status,
		"bytes", sw.n, "dur", time.Since(start), "token", who, "remote", r.RemoteAddr)
}

// statusOnly records the status the mux's own reply would have had.
type statusOnly struct {
	header http.Header
	status int
}

func (s *statusOnly) Header() http.Header         { return s.header }
func (s *statusOnly) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusOnly) WriteHeader(code int)        { s.status = code }

// Bearer is the token of r's Authorization header ("Bearer wq_..."), or,
// for browsers (the dashboard), the password of its Basic credentials.
func Bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") { // the scheme is case-insensitive (RFC 9110)
		return strings.TrimSpace(h[7:])
	}
	if _, pw, ok := r.BasicAuth(); ok {
		return pw
	}
	return ""
}

func (a *API) endpoint(rt Route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		who := "-"
		defer func() {
			if v := recover(); v != nil {
				a.opts.Logger.Error("wheelq server: panic serving a request", "route", rt.Pattern, "panic", v)
				if sw.status == 0 {
					a.writeErr(sw, r, apierr.New(apierr.Internal, "internal error"))
				}
			}
			if a.opts.Access {
				a.access(r, rt.Pattern, sw, start, who)
			}
		}()
		// The body bytes this request holds of MaxInflightBody (added by
		// decode), given back once: when the reply begins (any reply:
		// the result, an error, one a handler writes itself), or when the
		// handler returns or panics without one. Only this goroutine
		// touches held.
		var held int64
		sw.replying = func() { a.inflight.Add(-held); held = 0 }
		defer sw.replying()
		r = r.WithContext(context.WithValue(r.Context(), heldKey{}, &held))
		var p *auth.Principal
		if !rt.public {
			az := a.auth.Load()
			var err error
			if p, err = az.Authenticate(Bearer(r)); err != nil {
				sw.Header().Set("WWW-Authenticate", `Bearer realm="wheelq"`)
				a.writeErr(sw, r, err)
				return
			}
			who = p.ID
			if az.Open() {
				if err := a.crossOrigin.Check(r); err != nil {
					a.writeErr(sw, r, apierr.New(apierr.Forbidden, "a cross-site request from a browser (%v): a server without tokens serves the clients of its own host, not web pages", err))
					return
				}
			}
		}
		status, body, err := rt.h(a, sw, r, p)
		if err != nil {
			if rt.read() {
				a.writeErrAs(sw, r, err, errmap.FromRead)
			} else {
				a.writeErr(sw, r, err)
			}
			return
		}
		if sw.status != 0 {
			return // written by the handler
		}
		if body == nil {
			sw.WriteHeader(status)
			return
		}
		writeJSON(sw, status, body)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
	n      int
	// replying, if set, is called as the reply begins (its status is
	// written), before any of it can reach the client: endpoint gives
	// back the request's body bytes there. A long poll calls it too once
	// its body is read, before it waits (waiting); a second call gives
	// back nothing.
	replying func()
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.begin(code)
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.begin(http.StatusOK)
	}
	n, err := s.ResponseWriter.Write(b)
	s.n += n
	return n, err
}

// begin records the reply's status, the first, and calls replying.
func (s *statusWriter) begin(code int) {
	s.status = code
	if s.replying != nil {
		s.replying()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func writeJSON(w http.ResponseWriter, status int, body any) {
	b, err := json.Marshal(body)
	if err != nil {
		b = []byte(`{"error":{"code":"internal","message":"encoding the reply failed"}}`)
		status = http.StatusInternalServerError
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	// Its length, so that a reply flushed before the handler returns (a
	// long poll's) goes in one write, not chunked with a last chunk after.
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// WriteError answers r with err as the API's JSON error and its code
// (errmap.From): for handlers mounted beside the API (/metrics, /ui/).
func (a *API) WriteError(w http.ResponseWriter, r *http.Request, err error) { a.writeErr(w, r, err) }

// loggedInternal is the message of an internal error whose detail was
// logged (once: public logs it, and writeErr does not again).
const loggedInternal = "internal error (logged by the server)"

func (a *API) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	a.writeErrAs(w, r, err, errmap.From)
}

// writeErrAs is writeErr with err's code given by code: errmap.From, or
// errmap.FromRead for a route that changes nothing.
func (a *API) writeErrAs(w http.ResponseWriter, r *http.Request, err error, code func(error) *apierr.Error) {
	if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
		// The client went away during the call: not a bug, and no one
		// reads the answer (the access log shows 499).
		w.WriteHeader(statusClientGone)
		return
	}
	e := code(err)
	if e.Code == apierr.Internal && e.Message != loggedInternal {
		a.opts.Logger.Error("wheelq server: internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		e = apierr.New(apierr.Internal, loggedInternal)
	}
	if e.Code == apierr.Unavailable || e.Code == apierr.Contended || e.Code == apierr.OutcomeUnknown {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.Code.Status(), ErrorResponse{Error: *e})
}

// decode reads r's JSON body into v: at most limit bytes (413 past it,
// without reading the rest), no unknown fields, nothing after the value.
func (a *API) decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if r.ContentLength > limit {
		// Refused unread, and the connection closed after the reply: else
		// net/http would read what is left to reuse it.
		w.Header().Set("Connection", "close")
		return apierr.New(apierr.TooLarge, "body of %d bytes: the limit is %d", r.ContentLength, limit)
	}
	if most := a.opts.MaxInflightBody; most > 0 {
		n := limit // a body of unknown length may be that long
		if r.ContentLength >= 0 {
			n = r.ContentLength
		}
		if a.inflight.Add(n) > most {
			a.inflight.Add(-n)
			w.Header().Set("Connection", "close")
			return apierr.New(apierr.Unavailable, "the server holds %d bytes of request bodies already (http.max_inflight_body %d): retry", a.inflight.Load(), most)
		}
		if held, ok := r.Context().Value(heldKey{}).(*int64); ok {
			*held += n // given back when the reply begins
		} else {
			defer a.inflight.Add(-n)
		}
	}
	if sw, ok := w.(*statusWriter); ok {
		// MaxBytesReader tells the server's own writer to close the
		// connection after the reply.
		w = sw.ResponseWriter
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	if err := Decode(body, v); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			w.Header().Set("Connection", "close")
			return apierr.New(apierr.TooLarge, "body past the limit of %d bytes", limit)
		}
		return err
	}
	return nil
}

// Decode reads one JSON object from rd into v, strictly: a body that is
// not an object, not UTF-8 or with a lone surrogate escape (which
// encoding/json would store as U+FFFD, silently), an unknown field, a
// wrong type, invalid base64 or data after the object is an Invalid
// error saying what and where.
func Decode(rd io.Reader, v any) error {
	b, err := io.ReadAll(rd)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return err
		}
		return apierr.New(apierr.Invalid, "bad JSON: reading the body: %v", err)
	}
	first := bytes.TrimLeft(b, " \t\r\n")
	switch {
	case len(first) == 0:
		return apierr.New(apierr.Invalid, "empty body: want a JSON object")
	case first[0] != '{':
		return apierr.New(apierr.Invalid, "bad JSON: want an object, not %q...", first[:min(len(first), 8)])
	case !utf8.Valid(b):
		return apierr.New(apierr.Invalid, "bad JSON: not UTF-8 (byte %d)", invalidAt(b))
	}
	if at := loneSurrogate(b); at >= 0 {
		return apierr.New(apierr.Invalid, "bad JSON: a lone surrogate escape at byte %d (not a character)", at)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apierr.New(apierr.Invalid, "bad JSON: %v", err)
	}
	if !blank(b[dec.InputOffset():]) {
		return apierr.New(apierr.Invalid, "bad JSON: data after the object")
	}
	return nil
}

// invalidAt is the offset of b's first byte that is not UTF-8.
func invalidAt(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// loneSurrogate is the offset of the first \u escape in b of a UTF-16
// surrogate not in a pair (high then low), or -1. A backslash outside a
// string is a syntax error anyway, so escapes need no string tracking.
func loneSurrogate(b []byte) int {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		var r rune
		for _, c := range b[i+2 : i+6] {
			switch {
			case c >= '0' && c <= '9':
				r = r<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case c >= 'A' && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return r, true
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // another escape: skip its character
			continue
		}
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if lo, ok := hex4(i + 6); !ok || lo < 0xDC00 || lo > 0xDFFF {
				return i
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return i
		default:
			i += 5
		}
	}
	return -1
}

// blank says whether b is JSON white space only.
func blank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

func (a *API) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), a.opts.Timeout)
}

func (a *API) openapi(w http.ResponseWriter, _ *http.Request, _ *auth.Principal) (int, any, error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPI)
	return 0, nil, nil
}

func (a *API) healthz(http.ResponseWriter, *http.Request, *auth.Principal) (int, any, error) {
	return http.StatusOK, HealthResponse{Status: "ok"}, nil
}

func (a *API) readyz(_ http.ResponseWriter, r *http.Request, _ *auth.Principal) (int, any, error) {
	if a.opts.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if why := a.opts.Ready(ctx); why != "" {
			return http.StatusServiceUnavailable, HealthResponse{Status: "not ready", Reason: why}, nil
		}
	}
	return http.StatusOK, HealthResponse{Status: "ready"}, nil
}
