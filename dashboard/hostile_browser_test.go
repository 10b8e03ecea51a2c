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

// Hostile values a scheduler controls: topics, ids, payloads, headers,
// errors and schedule names that are markup, script URLs, or characters
// that mean something in a URL. Each handler would set window.__xss (the
// page's Content-Security-Policy would also stop an inline handler: the
// test checks that no element is made of them at all).
const (
	hostileTopic   = `<img src=x onerror="window.__xss='topic'">`
	hostileError   = `<img src=x onerror="window.__xss='error'"> & <b>bold</b>`
	hostilePayload = `</pre><script>window.__xss='payload'</script><svg onload="window.__xss='payload2'">`
	hostileRecur   = `<img src=x onerror="window.__xss='recur'">`
)

var hostileIDs = []string{
	`javascript:window.__xss='id'`,
	`"><svg onload="window.__xss='id2'">`,
	`a/b?c=d#e%41f/../..`,
	`..`,
	`%zz%`,
	"\u202eevil-rtl",
	`  spaced id  `,
	"日本語/ü",
	strings.Repeat("<i>x</i>", 63) + "<i>x</i", // 511 bytes (512 with the pending copies' "p")
}

// TestBrowserHostileJobs: every value a hostile job carries is shown as
// text on every page (the overview, the lists, a topic's page, a job's,
// the recurring schedules), never as an element or a script URL, and a
// job's link leads to that job whatever its id holds.
func TestBrowserHostileJobs(t *testing.T) {
	b := startBrowser(t)
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	cfg := wheelq.Config{Namespace: "hostile", Partitions: 4}
	worker, err := wheelq.New(rdb, cfg)
	require.NoError(t, err)
	require.NoError(t, worker.Handle(hostileTopic, wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error {
		return wheelq.Permanent(errors.New(hostileError))
	})))
	hdrs := map[string]string{`<b>k</b>`: `<img src=x onerror="window.__xss='header'">`}
	for _, id := range hostileIDs {
		_, err := worker.Schedule(ctx, hostileTopic, []byte(hostilePayload), wheelq.ID(id), wheelq.Headers(hdrs))
		require.NoError(t, err)
	}
	require.NoError(t, worker.Start(ctx))
	require.Eventually(t, func() bool {
		for _, id := range hostileIDs {
			if j, err := worker.Lookup(ctx, hostileTopic, id); err != nil || j.State != wheelq.StateDead {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, worker.Shutdown(ctx))
	q, err := wheelq.New(rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	// Pending ones too (the timeline and the pending lists).
	for _, id := range hostileIDs {
		_, err := q.Schedule(ctx, hostileTopic, []byte(hostilePayload), wheelq.ID("p"+id), wheelq.After(10*time.Minute), wheelq.Headers(hdrs))
		require.NoError(t, err)
	}
	require.NoError(t, q.DeclareRecurring(ctx, wheelq.Recurring{Name: hostileRecur, Topic: hostileTopic, Every: time.Hour}))
	web := (&fixture{q: q}).serve(t, Options{})

	exec := func(script string, out any, args ...any) {
		t.Helper()
		if args == nil {
			args = []any{}
		}
		b.must(b.call(http.MethodPost, b.base+"/execute/sync", map[string]any{"script": script, "args": args}, out))
	}
	// clean checks the page as it stands: no handler ran, no element
	// was made of data, every link is one of the page's own.
	clean := func(where string) {
		t.Helper()
		var r struct {
			XSS   any      `json:"xss"`
			Tags  []string `json:"tags"`
			Hrefs []string `json:"hrefs"`
		}
		exec(`return {xss: window.__xss === undefined ? null : window.__xss,
  tags: Array.from(document.querySelectorAll("body img, body svg, body script, body b, body i, body iframe, body object")).map(e => e.outerHTML),
  hrefs: Array.from(document.querySelectorAll("a")).map(a => a.getAttribute("href")).filter(h => !h.startsWith("#/"))}`, &r)
		require.Nil(t, r.XSS, "%s: a handler of the data ran", where)
		require.Empty(t, r.Tags, "%s: elements made of data", where)
		require.Empty(t, r.Hrefs, "%s: links not the page's own", where)
	}

	b.open(web.URL + "/wheelq/")
	b.waitContains("#topics table", hostileTopic)
	b.waitContains("#recurring", hostileRecur)
	b.waitContains("#timeline table.upcoming", "p"+hostileIDs[0])
	clean("overview")

	b.open(web.URL + "/wheelq/#/dead")
	b.waitContains("#list table.jobs", hostileError)
	var n int
	b.waitFor("every dead job listed", func() bool {
		exec(`return document.querySelectorAll("#list a.job-link").length`, &n)
		return n == len(hostileIDs)
	})
	clean("dead list")

	// The topic's page, from the overview's link.
	b.open(web.URL + "/wheelq/")
	b.click("#topics a.topic-link")
	b.waitContains("#list h2", hostileTopic)
	b.click(`#list nav.tabs a[data-tab="dead"]`)
	b.waitContains("#list table.jobs", hostileError)
	clean("topic page")

	for i, id := range hostileIDs {
		b.open(web.URL + "/wheelq/#/dead")
		b.waitFor("the dead list", func() bool {
			exec(`return document.querySelectorAll("#list a.job-link").length`, &n)
			return n == len(hostileIDs)
		})
		// Click the link of the row whose data-id is id.
		var clicked bool
		exec(`for (const tr of document.querySelectorAll("#list tbody tr")) {
  if (tr.getAttribute("data-id") === arguments[0]) { tr.querySelector("a.job-link").click(); return true; }
}
return false;`, &clicked, id)
		require.True(t, clicked, "row of %q", id)
		b.waitText("#job-state", "dead")
		var got struct {
			Head, Payload, Err string
		}
		exec(`return {head: document.querySelector("#job h2 code").textContent,
  payload: document.querySelector("#payload").textContent,
  err: document.querySelector("#job span.err").textContent}`, &got)
		require.Equal(t, hostileTopic+"/"+id, got.Head, "job %d: the link leads to the job, its id shown as it is", i)
		require.Equal(t, hostilePayload, got.Payload)
		require.True(t, strings.HasSuffix(got.Err, hostileError), got.Err)
		b.waitContains("#job", `<b>k</b>`) // the header, as text
		clean("job " + id)
	}
	for _, e := range b.consoleErrors() {
		require.NotContains(t, e, "Content Security Policy", "a CSP violation: something tried to run")
	}
}
