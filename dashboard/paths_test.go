package dashboard

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPathsStayInTheMount: no answer of the dashboard sends the browser
// out of the path it is mounted under. net/http's ServeMux redirects a
// path without its trailing slash ("/wheelq/api", "/wheelq/static") and
// one not in canonical form to a path of the stripped request, "/api/":
// the root of the site, another application's. Those are answered 404
// no_route, JSON as every other unknown path, as wheelq-server answers a
// path not in canonical form on any prefix.
func TestPathsStayInTheMount(t *testing.T) {
	t.Parallel()
	f := setup(t, "dash-paths")
	srv := f.serve(t, Options{})
	base := srv.URL + "/wheelq/"
	for _, p := range []string{"api", "static", "nope", "static/nope", "api/nope", "static/app.js/"} {
		r := do(t, http.MethodGet, base+p, "", nil)
		assert.Equal(t, http.StatusNotFound, r.status, "%s: %s (Location %q)", p, r.raw, r.header.Get("Location"))
		assert.Equal(t, string(CodeNoRoute), r.body["code"], "%s: a JSON error: %s", p, r.raw)
	}
	// Mounted behind a router that does not clean paths (the dashboard
	// alone behind StripPrefix here), as wheelq-server is behind its
	// canonical-path check.
	dash, err := New(f.q, Options{})
	require.NoError(t, err)
	h := http.StripPrefix("/wheelq", dash)
	for _, p := range []string{"/wheelq/api/./overview", "/wheelq/static/../api/overview", "/wheelq//api/overview", "/wheelq/api/overview/..", "/wheelqapi/overview"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "http://x/", nil)
		req.URL.Path, req.RequestURI = p, p
		h.ServeHTTP(rec, req)
		assert.Equal(t, http.StatusNotFound, rec.Code, "%s: Location %q", p, rec.Header().Get("Location"))
		assert.Contains(t, rec.Body.String(), `"code":"no_route"`, p)
	}
	// What is served still is.
	for _, p := range []string{"", "static/app.js", "static/style.css", "static/favicon.svg", "api/overview"} {
		r := do(t, http.MethodGet, base+p, "", nil)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", p, r.raw)
	}
}
