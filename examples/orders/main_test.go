package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

func TestOrders(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), srv.Client(t), &out, 0.0001))
	require.Contains(t, out.String(), "order-1: cancelled\norder-2: paid\norder-3: cancelled\n")
}
