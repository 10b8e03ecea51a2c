package dashboard

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/redistest"
)

// TestBrowser drives the dashboard in a real headless chromium: it clicks
// through the pages and actions as a user would, and saves screenshots
// (into $WHEELQ_SCREENSHOTS when set). It skips where chromium or
// chromedriver is missing, unless WHEELQ_REQUIRE_BROWSER is set.
func TestBrowser(t *testing.T) {
	b := startBrowser(t)

	t.Run("ClickThrough", func(t *testing.T) {
		b.t = t
		f := setup(t, "browser")
		srv := f.serve(t, Options{Title: "shop jobs"})
		ctx := context.Background()

		b.open(srv.URL + "/wheelq") // no slash: the redirect adds it
		require.True(t, strings.HasSuffix(b.url(), "/wheelq/"), b.url())
		b.element("#overview")
		b.waitText("#overview .cards .card:nth-child(1) .value", "2")
		b.waitText("#card-dead .value", "2") // two dead jobs
		b.waitContains("#lateness", "No run started yet")
		b.waitContains("#workers", "No worker process is started")
		for _, topic := range []string{"hooks", "mail", "orders", "reports"} {
			b.waitContains("#topics table", topic)
		}
		b.waitContains("#timeline", "1 job(s) due in the next hour")
		b.waitContains("#timeline table.upcoming", "o-123")
		b.screenshot("1-overview")
		b.click(`#timeline button[data-window="minute"]`)
		b.waitContains("#timeline", "0 job(s) due in the next minute")
		b.click(`#timeline button[data-window="day"]`)
		b.waitContains("#timeline", "1 job(s) due in the next day")

		b.click("#nav-overdue")
		b.waitContains("#list table.jobs", "r-1")
		b.click("#list button.act-run")
		b.waitContains("#flash", "run reports/r-1: done")
		b.waitContains("#list", "No overdue job.")
		j, err := f.q.Lookup(ctx, "reports", "r-1")
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), j.Due, time.Minute, "due now, not an hour ago")
		b.click("#nav-overview")
		b.element("#overview")

		// Pause a topic from its page, then resume it.
		b.click(`#topics a.topic-link[href="#/topic/orders"]`)
		b.waitText("#topic-state", "active")
		b.click("#list button.act-pause")
		// The topic's name is isolated in the sentence (a right-to-left
		// override in a name cannot reorder the words around it).
		require.Equal(t, "Pause \u2068orders\u2069? Its due jobs wait, in every process, until it is resumed.", b.alertText())
		b.acceptAlert()
		b.waitText("#topic-state", "paused")
		b.waitContains("#flash", "pause orders: done")
		paused, err := f.q.Paused(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"orders"}, paused, "paused, in Redis")
		b.screenshot("2-topic-paused")
		// A pending job of the paused topic: its Run now says it waits.
		hash := func(h string) {
			b.must(b.call(http.MethodPost, b.base+"/execute/sync", map[string]any{
				"script": `location.hash = arguments[0]`, "args": []any{h}}, nil))
		}
		hash("#/job/orders/o-123")
		b.waitText("#job-state", "pending")
		b.waitContains("button.act-run", "Run now (waits: topic paused)")
		hash("#/topic/orders")
		b.waitText("#topic-state", "paused")
		b.click("#list button.act-resume")
		b.waitText("#topic-state", "active")
		paused, err = f.q.Paused(ctx)
		require.NoError(t, err)
		require.Empty(t, paused, "resumed, in Redis")
		b.click("#nav-overview")
		b.element("#overview")

		b.click(`#topics a.topic-link[href="#/topic/mail"]`)
		b.waitContains("#list h2", "Topic mail")
		b.waitContains("#list", "No pending job in mail.")
		b.click(`#list nav.tabs a[data-tab="dead"]`)
		b.waitContains("#list table.jobs", deadID)
		b.waitContains("#list table.jobs", deadError)
		require.Len(t, b.elements("#list button.act-requeue"), 1)
		b.screenshot("3-topic-dead")

		b.click("#list a.job-link")
		b.waitText("#job-state", "dead")
		b.waitText("#payload", deadPayload) // the payload is shown as text
		b.waitContains("#job h2", deadID)   // the id is shown as text
		var title string
		b.must(b.call(http.MethodGet, b.base+"/title", nil, &title))
		require.Equal(t, "shop jobs", title, "no markup of the job ran")
		require.Empty(t, b.elements("#job img"), "no markup of the job became an element")
		b.screenshot("4-job-dead")

		b.click("button.act-requeue")
		b.waitText("#job-state", "pending")
		b.waitContains("#flash", "requeue mail/"+deadID+": done")
		j, err = f.q.Lookup(ctx, deadTopic, deadID)
		require.NoError(t, err)
		require.Equal(t, wheelq.StatePending, j.State, "requeued, in Redis")
		require.Empty(t, b.elements("button.act-requeue"), "a pending job has no requeue button")
		b.screenshot("5-job-requeued")

		b.click("button.act-cancel")
		b.acceptAlert()
		// Gone, or in the run history as cancelled where there is one.
		b.waitFor("the job cancelled", func() bool {
			ids := b.elements("#job")
			if len(ids) == 0 {
				return false
			}
			if strings.Contains(b.text(ids[0]), "Not found") {
				return true
			}
			st := b.elements("#job-state")
			return len(st) > 0 && b.text(st[0]) == "cancelled"
		})
		requireCancelled(t, f.q, deadTopic, deadID)
		require.Empty(t, b.elements("button.act"), "nothing to do with a cancelled job")
		b.screenshot("6-job-cancelled")

		// Every dead job of a topic at once.
		b.open(srv.URL + "/wheelq/#/topic/hooks/dead")
		b.waitContains("#list table.jobs", "h-1")
		b.click("#list button.act-requeue-all")
		b.acceptAlert()
		b.waitContains("#flash", "requeue every dead job of hooks: 1 done")
		b.waitContains("#list", "No dead job in hooks.")
		j, err = f.q.Lookup(ctx, "hooks", "h-1")
		require.NoError(t, err)
		require.Equal(t, wheelq.StatePending, j.State, "requeued, in Redis")
		b.click(`#list nav.tabs a[data-tab="pending"]`)
		b.waitContains("#list table.jobs", "h-1")
		b.screenshot("7-topic-requeued-all")
		// The 404 of the cancelled job's lookup is the one error expected.
		for _, e := range b.consoleErrors() {
			require.Contains(t, e, "404", "a console error: %s", e)
		}
	})

	t.Run("Lateness", func(t *testing.T) {
		b.t = t
		b.fresh()
		// A started worker runs jobs; a dashboard served by a process that
		// runs none (as under wheelq-server with queue.start false) shows their lateness and the
		// worker (its panels must not read 0).
		srv := redistest.Start(t, redistest.Options{})
		ctx := context.Background()
		q, err := wheelq.New(srv.Client(t), wheelq.Config{Namespace: "browser-late", Partitions: 4})
		require.NoError(t, err)
		t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
		require.NoError(t, q.Handle("tick", wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error { return nil })))
		require.NoError(t, q.Start(ctx))
		for i := range 50 {
			_, err := q.Schedule(ctx, "tick", nil, wheelq.After(time.Duration(i)*time.Millisecond))
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool {
			s, err := q.Stats(ctx)
			return err == nil && s.Succeeded == 50
		}, 20*time.Second, 10*time.Millisecond)
		viewer, err := wheelq.New(srv.Client(t), wheelq.Config{Namespace: "browser-late", Partitions: 4})
		require.NoError(t, err)
		t.Cleanup(func() { _ = viewer.Shutdown(context.Background()) })
		require.Eventually(t, func() bool {
			ws, err := viewer.Workers(ctx)
			return err == nil && len(ws) == 1 && ws[0].Fired == 50
		}, 20*time.Second, 50*time.Millisecond, "the worker published its figures")
		web := (&fixture{q: viewer}).serve(t, Options{})
		b.open(web.URL + "/wheelq/")
		b.waitContains("#lateness", "over the 50 run(s) the namespace's worker processes started")
		b.waitText("#overview .cards .card:nth-child(4) .value", "0") // running now
		require.Len(t, b.elements("#workers tbody tr"), 1, "one worker")
		require.Len(t, b.elements("#lateness table.bars tr"), 3, "p50, p99, max")
		var widths []string
		b.must(b.call(http.MethodPost, b.base+"/execute/sync", map[string]any{
			"script": `return Array.from(document.querySelectorAll("#lateness .bar")).map(e => e.style.width)`, "args": []any{}}, &widths))
		require.Len(t, widths, 3)
		for _, w := range widths {
			require.NotEmpty(t, w, "the bars are sized (the CSP allows styles set from the script)")
		}
		b.screenshot("8-lateness")
		require.Empty(t, b.consoleErrors())
	})

	t.Run("Recurring", func(t *testing.T) {
		b.t = t
		f := setup(t, "browser-recur")
		srv := f.serve(t, Options{})
		ctx := context.Background()
		require.NoError(t, f.q.DeclareRecurring(ctx, wheelq.Recurring{Name: "nightly-report", Topic: "reports",
			Cron: "0 3 * * *", TimeZone: "Europe/Paris"}))
		b.open(srv.URL + "/wheelq/")
		b.waitContains("#recurring", "nightly-report")
		b.waitContains("#recurring", "0 3 * * * (Europe/Paris)")
		b.screenshot("8-recurring")
		b.click(`#recurring button.act-unrecur`)
		b.acceptAlert()
		b.waitContains("#flash", "unrecur reports/nightly-report: done")
		b.waitFor("the panel gone", func() bool { return len(b.elements("#recurring")) == 0 })
		rs, err := f.q.Recurrings(ctx)
		require.NoError(t, err)
		require.Empty(t, rs, "removed, in Redis")
	})

	t.Run("ReadOnly", func(t *testing.T) {
		b.t = t
		b.fresh()
		f := setup(t, "browser-ro")
		srv := f.serve(t, Options{ReadOnly: true})
		b.open(srv.URL + "/wheelq/#/job/" + deadTopic + "/" + urlEscape(deadID))
		b.waitText("#job-state", "dead")
		b.waitFor("the read-only badge", func() bool { return b.text(b.element("#mode")) == "read-only" })
		require.Empty(t, b.elements("button.act"), "no action button")
		b.click("#nav-dead")
		b.waitContains("#list table.jobs", deadID)
		require.Empty(t, b.elements("button.act"), "no action button")
		b.screenshot("9-read-only")
		require.Empty(t, b.consoleErrors(), "no script error, no CSP violation")

		// A request forged from the page itself, header and all.
		var status float64
		b.execAsync(`const done = arguments[arguments.length - 1];
fetch("api/requeue", {method: "POST", headers: {"Content-Type": "application/json", "X-Wheelq-Dashboard": "1"},
  body: JSON.stringify({topic: "mail", id: `+jsString(deadID)+`})}).then(r => done(r.status), e => done(-1));`, &status)
		require.Equal(t, float64(http.StatusForbidden), status)
		j, err := f.q.Lookup(context.Background(), deadTopic, deadID)
		require.NoError(t, err)
		require.Equal(t, wheelq.StateDead, j.State, "nothing changed")
	})

	t.Run("AuthorizeRefuses", func(t *testing.T) {
		b.t = t
		b.fresh()
		f := setup(t, "browser-auth")
		srv := f.serve(t, Options{Authorize: func(r *http.Request, a Action) error {
			if a.Kind == KindRequeue && a.Topic != "" {
				return errors.New("requeueing is for on-call staff only")
			}
			return nil
		}})
		b.open(srv.URL + "/wheelq/#/topic/mail/dead")
		b.waitContains("#list table.jobs", deadID)
		b.click("#list button.act-requeue")
		b.waitContains("#flash.error", "requeueing is for on-call staff only")
		j, err := f.q.Lookup(context.Background(), deadTopic, deadID)
		require.NoError(t, err)
		require.Equal(t, wheelq.StateDead, j.State, "refused: nothing changed")
		b.screenshot("10-refused")
		for _, e := range b.consoleErrors() {
			require.Contains(t, e, "403", "a console error: %s", e)
		}
	})
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == '<' || r == '>':
			b.WriteString(`\u00`)
			const hex = "0123456789abcdef"
			b.WriteByte(hex[r>>4])
			b.WriteByte(hex[r&15])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
