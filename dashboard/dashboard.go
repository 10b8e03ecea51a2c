// Package dashboard is a web dashboard for a wheelq namespace, as an
// http.Handler to mount in your own server under any path:
//
//	dash, err := dashboard.New(q, dashboard.Options{ReadOnly: true})
//	if err != nil { ... }
//	mux.Handle("/wheelq/", http.StripPrefix("/wheelq", dash))
//
// It shows the namespace's topics with their counts (pending, overdue,
// running, dead) and state, a timeline of the jobs due in the next minute,
// hour or day, the lateness of the runs started in this process, lists of
// jobs by topic and state (paged, in due order), a job's detail, and
// (unless ReadOnly) requeues, cancels and runs jobs, one or every dead job
// of a topic at once, and pauses and resumes topics. The page is plain HTML, CSS and JavaScript embedded
// in the binary: nothing to build, nothing fetched from elsewhere, every
// link relative.
//
// # Safety
//
// The dashboard has no login of its own: mount it behind your
// authentication, and decide who may do what with Options.Authorize (it
// is asked before every view and every action) or turn every action off
// with Options.ReadOnly. State changes are POST requests that must carry
// the header X-Wheelq-Dashboard (which a cross-site form cannot set, and a
// cross-site fetch cannot send without a CORS preflight the dashboard
// never grants) and pass net/http's CrossOriginProtection (Sec-Fetch-Site
// and Origin checks). The page writes all data (job ids, payloads, errors)
// as text, never as markup, and is served with a Content-Security-Policy
// that allows only its own script and style.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/wheelq/wheelq"
)

//go:embed static
var staticFiles embed.FS

// HeaderName is the request header every state-changing request must
// carry (with any non-empty value); the dashboard's page sets it.
const HeaderName = "X-Wheelq-Dashboard"

// Code is the stable code of an error answered by the dashboard's JSON
// endpoints, {"error": "a message for people", "code": "..."}: a script
// driving the endpoints branches on the code, not on the message.
type Code string

// The codes of error answers, with their HTTP status.
const (
	CodeInvalid          Code = "invalid"            // 400: a bad parameter or request body
	CodeForbidden        Code = "forbidden"          // 403: Options.Authorize said no
	CodeCrossSite        Code = "cross_site"         // 403: an action without HeaderName, or from another origin
	CodeReadOnly         Code = "read_only"          // 403: an action on a dashboard with Options.ReadOnly
	CodeNotFound         Code = "not_found"          // 404: no such job
	CodeNoRoute          Code = "no_route"           // 404: no such endpoint or file, or a path not in canonical form (never redirected)
	CodeMethodNotAllowed Code = "method_not_allowed" // 405: an action asked for with another method than POST
	CodeLayout           Code = "layout"             // 409: the namespace's layout is another version (wheelq.ErrLayout)
	CodePaused           Code = "paused"             // 409: the topic is paused (wheelq.ErrPaused)
	CodeTopicMode        Code = "topic_mode"         // 409: a requeue of a topic the queue does not run (wheelq.ErrTopicMode)
	CodeTooLarge         Code = "too_large"          // 413: an action's body past 64 KiB
	CodeInternal         Code = "internal"           // 500: a bug, or an error the dashboard has no code for
	CodeUnavailable      Code = "unavailable"        // 503: Redis unreachable, or the queue closed: retry
	CodeContended        Code = "contended"          // 503: a schedule changed under its removal at each try (wheelq.ErrContended): retry
	CodeOutcomeUnknown   Code = "outcome_unknown"    // 504: Redis did not answer an action: it may have applied
	CodeTimeout          Code = "timeout"            // 504: the request took past Options.Timeout
)

// Kind names what a request asks to do.
type Kind string

// The kinds of Action.
const (
	// KindView reads: the page, the figures, the lists, a job.
	KindView Kind = "view"
	// KindRequeue moves a dead job back to pending (Queue.Requeue), or
	// every dead job of a topic (Queue.RequeueWhere).
	KindRequeue Kind = "requeue"
	// KindCancel deletes a pending or dead job (Queue.Cancel), or every
	// dead job of a topic (Queue.CancelWhere).
	KindCancel Kind = "cancel"
	// KindRun makes a pending job due now (Queue.RunNow).
	KindRun Kind = "run"
	// KindPause pauses a topic (Queue.Pause): its due jobs wait.
	KindPause Kind = "pause"
	// KindResume resumes a paused topic (Queue.Resume).
	KindResume Kind = "resume"
	// KindUnrecur removes a recurring schedule (Queue.RemoveRecurring):
	// Topic is the schedule's topic, ID its name.
	KindUnrecur Kind = "unrecur"
)

// actionKinds returns the kinds that change state.
func actionKinds() []Kind {
	return []Kind{KindRequeue, KindCancel, KindRun, KindPause, KindResume, KindUnrecur}
}

// Action is what a request asks to do: its kind and its target. Topic and
// ID are those of the job acted on or viewed; ID is empty for a view of a
// topic's jobs, for a pause or resume of Topic, and with All (an action on
// every dead job of Topic). All
// are empty for a view of the whole namespace, and when the dashboard asks
// whether to show a kind of button at all (a hook that decides per topic
// should allow the empty target: the button then shows, and an action on
// a topic it refuses is refused with its message). A view of the whole
// namespace that the hook allows shows the namespace's totals and
// workers, and of its lists, timeline, topics and schedules only those
// of the topics whose view (Topic set) the hook allows too, asked once
// per topic per request.
type Action struct {
	Kind      Kind
	Topic, ID string
	// All says the action is on every dead job of Topic (requeue or
	// cancel).
	All bool
}

// Options configures a dashboard. The zero value is a dashboard on which
// every action is allowed: mount it behind your own authentication.
type Options struct {
	// ReadOnly hides every action button, and makes the dashboard refuse
	// every state-changing request with 403 Forbidden.
	ReadOnly bool
	// Authorize, when set, is asked before each request is served: views
	// (KindView: the page, its figures and lists, a job) and actions (not
	// the page's script, style and icon, which hold no data). A non-nil
	// error refuses the request with
	// 403 Forbidden and the error's text as the message shown; nil allows
	// it. Use it to decide who may act (by a session, a header your proxy
	// sets, r.TLS's client certificate...). It must be safe to call from
	// many goroutines.
	Authorize func(r *http.Request, a Action) error
	// Title names the dashboard in the page's header and title. Default
	// "wheelq".
	Title string
	// Timeout bounds the queue calls of one request. Default 5s; negative
	// is an error.
	Timeout time.Duration
	// Refresh is how often the page reloads what it shows. Default 5s;
	// negative: never (reload by hand).
	Refresh time.Duration
}

// Handler serves the dashboard. Make one with New.
type Handler struct {
	q       *wheelq.Queue
	opts    Options
	mux     *http.ServeMux
	csrf    *http.CrossOriginProtection
	static  http.Handler
	files   fs.FS // static's files
	now     func() time.Time
	refresh time.Duration
	counts  countsCache // Queue.Counts shared by the overviews (api.go)
}

// New returns a dashboard of q. A nil q, a negative Timeout or an Options
// value out of range is an error wrapping wheelq.ErrInvalidOption. q may
// be a queue that is never started (a producer): the dashboard only reads
// and changes what Redis holds.
func New(q *wheelq.Queue, opts Options) (*Handler, error) {
	if q == nil {
		return nil, fmt.Errorf("%w: dashboard: nil *wheelq.Queue", wheelq.ErrInvalidOption)
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("%w: dashboard: Timeout %v < 0", wheelq.ErrInvalidOption, opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Title == "" {
		opts.Title = "wheelq"
	}
	h := &Handler{q: q, opts: opts, mux: http.NewServeMux(), csrf: http.NewCrossOriginProtection(), now: time.Now}
	switch {
	case opts.Refresh == 0:
		h.refresh = 5 * time.Second
	case opts.Refresh > 0:
		h.refresh = opts.Refresh
	}
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, fmt.Errorf("dashboard: embedded files: %w", err)
	}
	h.static, h.files = http.FileServerFS(sub), sub
	h.routes()
	return h, nil
}

func (h *Handler) routes() {
	h.mux.HandleFunc("GET /{$}", h.index)
	h.mux.Handle("GET /static/", http.StripPrefix("/static", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") { // no directory listings
			writeError(w, http.StatusNotFound, CodeNoRoute, "no file "+r.URL.Path)
			return
		}
		if _, err := fs.Stat(h.files, strings.TrimPrefix(r.URL.Path, "/")); err != nil {
			noRoute(w, r) // JSON, as every unknown path, not FileServer's text
			return
		}
		h.static.ServeHTTP(w, r)
	})))
	h.mux.HandleFunc("GET /api/overview", h.overview)
	h.mux.HandleFunc("GET /api/jobs", h.jobs)
	h.mux.HandleFunc("GET /api/job", h.job)
	h.mux.HandleFunc("GET /api/timeline", h.timeline)
	h.mux.HandleFunc("GET /api/recurring", h.recurring)
	for _, k := range actionKinds() {
		h.mux.HandleFunc("POST /api/"+string(k), h.act(k))
	}
	// No path is left to ServeMux's redirects: "/api" and "/static" (to
	// their slashed subtree) and a path not in canonical form (cleaned)
	// would go to a path of the stripped request, "/api/", out of where
	// the dashboard is mounted.
	h.mux.HandleFunc("/static", noRoute)
	h.mux.HandleFunc("/api", noRoute)
	h.mux.HandleFunc("/", noRoute)
	h.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		for _, k := range actionKinds() {
			if r.URL.Path == "/api/"+string(k) {
				w.Header().Set("Allow", http.MethodPost)
				writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, fmt.Sprintf("%s wants POST", k))
				return
			}
		}
		writeError(w, http.StatusNotFound, CodeNoRoute, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
	})
}

// ServeHTTP serves the page, its files and its JSON endpoints, at paths
// relative to where the handler is mounted (strip your prefix with
// http.StripPrefix).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Content-Security-Policy",
		"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'")
	if r.URL.Path == "" {
		// Mounted with StripPrefix("/wheelq") and asked for "/wheelq":
		// the relative links need the trailing slash.
		last := r.URL.RawPath
		if last == "" {
			last = r.RequestURI
		}
		last, _, _ = strings.Cut(last, "?")
		last = last[strings.LastIndexByte(last, '/')+1:]
		if last == "" {
			last = "."
		}
		// Not http.Redirect: it would resolve the relative location
		// against the stripped path.
		w.Header().Set("Location", last+"/")
		w.WriteHeader(http.StatusMovedPermanently)
		return
	}
	if !canonical(r.URL.Path) {
		noRoute(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// canonical reports whether p is a path ServeMux serves as it is: rooted,
// without an empty, "." or ".." segment (ServeMux redirects any other to
// its cleaned form).
func canonical(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

func noRoute(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, CodeNoRoute, fmt.Sprintf("no endpoint or file %s %s", r.Method, r.URL.Path))
}

// authorize asks Options.Authorize about a, and writes the refusal when
// it says no.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request, a Action) bool {
	if h.opts.Authorize == nil {
		return true
	}
	if err := h.opts.Authorize(r, a); err != nil {
		msg := err.Error()
		if msg == "" {
			msg = "not allowed"
		}
		writeError(w, http.StatusForbidden, CodeForbidden, msg)
		return false
	}
	return true
}

// allowed reports whether the page should show kind's buttons.
func (h *Handler) allowed(r *http.Request, k Kind) bool {
	if h.opts.ReadOnly {
		return false
	}
	return h.opts.Authorize == nil || h.opts.Authorize(r, Action{Kind: k}) == nil
}

// viewable says whether Options.Authorize lets r view a topic's jobs,
// asking once per topic (a view of the whole namespace lists only the
// jobs, rows and schedules of the topics r may view).
func (h *Handler) viewable(r *http.Request) func(topic string) bool {
	if h.opts.Authorize == nil {
		return func(string) bool { return true }
	}
	seen := map[string]bool{}
	return func(topic string) bool {
		ok, asked := seen[topic]
		if !asked {
			ok = h.opts.Authorize(r, Action{Kind: KindView, Topic: topic}) == nil
			seen[topic] = ok
		}
		return ok
	}
}

func (h *Handler) index(w http.ResponseWriter, r *http.Request) {
	if !h.authorize(w, r, Action{Kind: KindView}) {
		return
	}
	b, err := staticFiles.ReadFile("static/index.html")
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeInternal, err.Error())
		return
	}
	page := strings.Replace(string(b), "{{TITLE}}", htmlEscaper.Replace(h.opts.Title), 2)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(page))
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;")

// errorStatus maps an error of the queue to an HTTP status and a code.
func errorStatus(err error) (int, Code) {
	switch {
	case errors.Is(err, wheelq.ErrNotFound):
		return http.StatusNotFound, CodeNotFound
	case errors.Is(err, wheelq.ErrInvalidTopic), errors.Is(err, wheelq.ErrInvalidID), errors.Is(err, wheelq.ErrInvalidCursor),
		errors.Is(err, wheelq.ErrInvalidOption), errors.Is(err, wheelq.ErrTooFar):
		return http.StatusBadRequest, CodeInvalid
	case errors.Is(err, wheelq.ErrLayout):
		return http.StatusConflict, CodeLayout
	case errors.Is(err, wheelq.ErrPaused):
		return http.StatusConflict, CodePaused
	case errors.Is(err, wheelq.ErrTopicMode):
		return http.StatusConflict, CodeTopicMode
	case errors.Is(err, wheelq.ErrContended):
		return http.StatusServiceUnavailable, CodeContended
	case errors.Is(err, wheelq.ErrUnavailable), errors.Is(err, wheelq.ErrClosed):
		return http.StatusServiceUnavailable, CodeUnavailable
	case errors.Is(err, wheelq.ErrOutcomeUnknown):
		return http.StatusGatewayTimeout, CodeOutcomeUnknown
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, CodeTimeout
	}
	return http.StatusInternalServerError, CodeInternal
}
