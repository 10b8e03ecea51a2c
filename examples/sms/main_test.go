package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

func TestSMS(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), srv.Client(t), &out, 0.01))
	require.Equal(t, "sent r-1 (attempt 1): Ada, your appointment is in 2 hours\n"+
		"worker crashed holding r-2 (attempt 1)\n"+
		"sent r-3 (attempt 1): Linus, your appointment is in 2 hours\n"+
		"sent r-2 (attempt 2): Grace, your appointment is in 2 hours [after: wheelq: reservation lost: time-to-run lapsed]\n"+
		"r-2 is done after 2 attempts\n", out.String())
}
