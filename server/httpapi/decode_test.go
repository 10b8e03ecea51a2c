package httpapi_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/httpapi"
)

// TestDecodeTrailing: white space may follow a request's value, however
// much of it and wherever it was cut between reads; anything else after
// it, near or far, is an Invalid error; a body past its limit there is
// the limit's error.
func TestDecodeTrailing(t *testing.T) {
	value := `{"id":"x","payload":"p"}`
	for _, c := range []struct {
		body    string
		invalid string // "" when the body is good
	}{
		{value, ""},
		{value + "\n", ""},
		{value + strings.Repeat(" \t\r\n", 500), ""},
		{value + " {}", "data after the object"},
		{value + `{"id":"y"}`, "data after the object"},
		{value + strings.Repeat(" ", 1000) + "x", "data after the object"},
		{value + strings.Repeat("\n", 63) + "]", "data after the object"},
		{value + "\x00", "data after the object"},
		{`{"id":"x","nope":1}`, "unknown field"},
		{"", "empty body"},
	} {
		var req httpapi.ScheduleRequest
		err := httpapi.Decode(strings.NewReader(c.body), &req)
		if c.invalid == "" {
			require.NoError(t, err, "%q", c.body)
			require.Equal(t, "x", req.ID)
			continue
		}
		var e *apierr.Error
		require.True(t, errors.As(err, &e), "%q: %v", c.body, err)
		require.Equal(t, apierr.Invalid, e.Code)
		require.Contains(t, e.Message, c.invalid, "%q", c.body)
	}
	// White space past the body's limit: the limit's error, as for a
	// value past it.
	body := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(value+strings.Repeat(" ", 4096))), int64(len(value)+100))
	var req httpapi.ScheduleRequest
	var mb *http.MaxBytesError
	require.ErrorAs(t, httpapi.Decode(body, &req), &mb)
}
