package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

func TestUndo(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), srv.Client(t), &out, 3e-6))
	require.Equal(t, "space-a will be deleted in 24h\n"+
		"space-b will be deleted in 24h\n"+
		"delete of space-a already requested\n"+
		"undo: space-b kept\n"+
		"deleted space-a\n"+
		"lookup: space-a is done after 1 attempt(s)\n"+
		"undo: too late for space-a\n", out.String())
}
