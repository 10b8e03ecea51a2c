package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

func TestSMS(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), srv.Client(t), &out, 0.01))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	// Jobs due 10 ms apart: on a busy machine the first may already be
	// due, and queued, when the worker asks, and the second handed to it
	// first; what must hold is below.
	want := []string{
		"sent r-1 (attempt 1): Ada, your appointment is in 2 hours",
		"worker crashed holding r-2 (attempt 1)",
		"sent r-3 (attempt 1): Linus, your appointment is in 2 hours",
		"sent r-2 (attempt 2): Grace, your appointment is in 2 hours [after: wheelq: reservation lost: time-to-run lapsed]",
		"r-2 is done after 2 attempts",
	}
	require.ElementsMatch(t, want, lines, "%s", out.String())
	require.Less(t, slices.Index(lines, want[1]), slices.Index(lines, want[3]), "the lapsed reservation is handed out again after the crash")
	require.Equal(t, want[4], lines[len(lines)-1])
}
