package recovery

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/leakcheck"
)

// TestLifecycleShape: the recoverer has the lifecycle every background
// component of the engine shares (leakcheck.Lifecycle). Not parallel: it
// counts goroutines.
func TestLifecycleShape(t *testing.T) {
	leakcheck.Lifecycle(t, "github.com/wheelq/wheelq/internal/recovery", func() (func(), func()) {
		r, _, _, _, _ := setup(t)
		return func() { r.Start(context.Background()) },
			func() { require.NoError(t, r.Stop(context.Background())) }
	})
}
