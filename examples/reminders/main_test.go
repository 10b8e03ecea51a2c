package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

func TestReminders(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var out bytes.Buffer
	// 49 hours in about 1.8 s. (At 2e-6 the first reminder fell due 7 ms
	// after booking, and a slow CI run had it claimed before the move:
	// Reschedule then rightly said ErrRunning.)
	require.NoError(t, run(context.Background(), srv.Client(t), &out, 1e-5))
	require.Contains(t, out.String(),
		"reminder booking-7@24h0m0s: your appointment is in 24h0m0s\n"+
			"reminder booking-7@2h0m0s: your appointment is in 2h0m0s\n"+
			"reminder booking-7@15m0s: your appointment is in 15m0s\n")
}
