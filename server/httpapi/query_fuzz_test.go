package httpapi

import (
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/apierr"
)

// FuzzListQuery: any query string on the list routes (GET /v1/jobs,
// /v1/dead, ...): no panic, and a refusal is an Invalid error with a
// message; a limit taken is within 1-1000.
func FuzzListQuery(f *testing.F) {
	for _, s := range []string{
		"topic=t&state=pending&overdue=true&due_after=2026-11-26T10:00:00Z&due_before=2026-11-27T10:00:00.5Z&cursor=abc&limit=10",
		"limit=0", "limit=1001", "limit=-1", "limit=99999999999999999999", "state=nope", "overdue=maybe",
		"due_after=yesterday", "nope=1", "topic=%ff%00", "limit=1&limit=2", "%", "a=b=c&&",
	} {
		f.Add(s, false)
	}
	a := &API{}
	f.Fuzz(func(t *testing.T, raw string, oneState bool) {
		r := &http.Request{Method: "GET", URL: &url.URL{Path: "/v1/jobs", RawQuery: raw}}
		state := wheelq.JobState(0)
		if oneState {
			state = wheelq.StateDead
		}
		_, _, limit, err := a.listQuery(r, state)
		if err != nil {
			var e *apierr.Error
			if !errors.As(err, &e) || e.Code != apierr.Invalid || e.Message == "" {
				t.Fatalf("%q: %v is not an Invalid error", raw, err)
			}
			return
		}
		if limit < 1 || limit > 1000 {
			t.Fatalf("%q: limit %d taken", raw, limit)
		}
	})
}
