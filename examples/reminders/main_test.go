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
	// 49 hours in about 0.35 s.
	require.NoError(t, run(context.Background(), srv.Client(t), &out, 2e-6))
	require.Contains(t, out.String(),
		"reminder booking-7@24h0m0s: your appointment is in 24h0m0s\n"+
			"reminder booking-7@2h0m0s: your appointment is in 2h0m0s\n"+
			"reminder booking-7@15m0s: your appointment is in 15m0s\n")
}
