package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/httpapi"
)

// validated wraps h so that every response of a route in the OpenAPI
// document is checked against it (status, content type, body schema)
// with kin-openapi; a response the document does not allow fails t. The
// requests are not checked: the tests send bad ones on purpose, and the
// server's own decoding answers them. Streams are passed through.
func validated(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(httpapi.OpenAPI())
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()))
	doc.Servers = nil // any host: the test server's port is its own
	router, err := legacy.NewRouter(doc)
	require.NoError(t, err)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route, params, err := router.FindRoute(r)
		if err != nil || route.Path == "/v1/reserve/stream" || r.ContentLength < 0 || r.ContentLength > 1<<20 {
			h.ServeHTTP(w, r) // not in the document (404/405), a stream, or a body the tests send slowly or past the limit
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}}
		if err := openapi3filter.ValidateResponse(r.Context(), &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
			Body: io.NopCloser(bytes.NewReader(rec.Body.Bytes())), Options: in.Options,
		}); err != nil {
			t.Errorf("%s %s: response %d not as the OpenAPI document says: %v\n%s", r.Method, r.URL.Path, rec.Code, err, rec.Body.Bytes())
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}
