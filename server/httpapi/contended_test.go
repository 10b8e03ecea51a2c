package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/apierr"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/httpapi"
)

// TestContendedIsRetryable: a recurring schedule's declaration or removal
// that lost the race for it at each of its tries (wheelq.ErrContended,
// as DeclareRecurringIf wraps it) is 503 contended with Retry-After, as
// unavailable is: nothing was done and the same request may go through
// now. (Before, it was 500 internal, logged as a bug.)
func TestContendedIsRetryable(t *testing.T) {
	az, err := auth.New(nil, true)
	require.NoError(t, err)
	api := httpapi.New(nil, az, defaultOpts())
	for _, method := range []string{http.MethodPut, http.MethodDelete} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, "/v1/recurring/beat", nil)
		api.WriteError(w, r, fmt.Errorf("wheelq: declare recurring %q: %w", "beat", wheelq.ErrContended))
		require.Equal(t, http.StatusServiceUnavailable, w.Code, "%s", w.Body)
		require.Equal(t, "1", w.Header().Get("Retry-After"))
		var er httpapi.ErrorResponse
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &er), "%s", w.Body)
		require.Equal(t, apierr.Contended, er.Error.Code)
		require.Contains(t, er.Error.Message, "contended")
	}
}
