package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

func TestFlaky(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), srv.Client(t), &out, 0.01))
	require.Equal(t, "attempt 1/3: downstream unavailable\n"+
		"attempt 2/3: downstream unavailable\n"+
		"attempt 3/3: downstream unavailable\n"+
		"dead-lettered evt-1 after 3 attempts: 503 service unavailable\n"+
		"downstream is back: requeued evt-1\n"+
		"attempt 1/3: delivered {\"paid\":\"order-1\"}\n", out.String())
}
