package apierr_test

import (
	"errors"
	"fmt"
	"go/build"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/apierr"
)

// TestTable: every code has a status and a RESP prefix of its own.
func TestTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range apierr.Codes() {
		require.GreaterOrEqual(t, c.Status, 400)
		require.Equal(t, c.Status, c.Code.Status())
		require.NotEmpty(t, c.Doc)
		p := c.Code.RESPPrefix()
		require.False(t, seen[p], "prefix %s twice", p)
		seen[p] = true
	}
	require.Equal(t, "RESERVATIONLOST", apierr.ReservationLost.RESPPrefix())
}

// TestIs: an *Error matches any of its code through wrapping.
func TestIs(t *testing.T) {
	e := apierr.New(apierr.Paused, "x")
	require.True(t, errors.Is(fmt.Errorf("w: %w", e), &apierr.Error{Code: apierr.Paused}))
	require.False(t, errors.Is(e, &apierr.Error{Code: apierr.Invalid}))
}

// TestStandardLibraryOnly: apierr, and the Go client that uses it, import
// the standard library only (docs/server.md says so of the client; apierr
// imported the library and auth for From, now internal/errmap's, and a
// client's build pulled in go-redis and the rest).
func TestStandardLibraryOnly(t *testing.T) {
	for _, dir := range []string{".", "../client"} {
		p, err := build.ImportDir(dir, 0)
		require.NoError(t, err)
		for _, imp := range p.Imports {
			if imp == "github.com/wheelq/wheelq/server/apierr" {
				continue
			}
			std, err := build.Import(imp, "", build.FindOnly)
			require.NoError(t, err, imp)
			require.True(t, std.Goroot, "%s imports %s, not the standard library", dir, imp)
		}
	}
}
