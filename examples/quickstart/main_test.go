package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQuickstart(t *testing.T) {
	t.Setenv("REDIS_ADDR", "") // the embedded Redis, as on a bare machine
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	got := out.String()
	require.Contains(t, got, "embedded in-process Redis")
	require.Contains(t, got, "cancelled third")
	require.Regexp(t, regexp.MustCompile(`(?s)fired first.*fired second.*fired fourth`), got)
	require.NotContains(t, got, "never printed")
}
