package httpapi_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/httpapi"
)

// TestReadyz: /readyz says 503 with the check's reason while the server
// is not ready (its partitions still loading, Redis unreachable), 200
// once it is, needs no token, and answers within its own bound when the
// check hangs (a Redis that does not reply): never a hung probe.
func TestReadyz(t *testing.T) {
	var why atomic.Value
	why.Store("loading the partitions' jobs")
	var hang atomic.Bool
	e := setup(t, nil, httpapi.Options{Ready: func(ctx context.Context) string {
		if hang.Load() {
			<-ctx.Done()
			return "redis unreachable: " + ctx.Err().Error()
		}
		return why.Load().(string)
	}})
	ready := func() (int, httpapi.HealthResponse) {
		status, body := e.do("GET", "/readyz", nil)
		var h httpapi.HealthResponse
		require.NoError(t, json.Unmarshal(body, &h), "%s", body)
		return status, h
	}
	status, h := ready()
	require.Equal(t, 503, status)
	require.Equal(t, httpapi.HealthResponse{Status: "not ready", Reason: "loading the partitions' jobs"}, h)
	why.Store("")
	status, h = ready()
	require.Equal(t, 200, status)
	require.Equal(t, "ready", h.Status)

	hang.Store(true)
	start := time.Now()
	status, h = ready()
	require.Equal(t, 503, status)
	require.Contains(t, h.Reason, "deadline exceeded")
	require.Less(t, time.Since(start), wait, "the probe answered")
	require.GreaterOrEqual(t, time.Since(start), time.Second, "the check had its time")
}
