package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

func TestCrashAndRestart(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	bin := filepath.Join(t.TempDir(), "crash")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())
	var out bytes.Buffer
	require.NoError(t, parent(bin, srv.Addr, "crash-test", &out))
	got := out.String()
	require.Contains(t, got, "killed child")
	for i := range jobs {
		require.Equal(t, 1, strings.Count(got, "fired job-"+string(rune('0'+i))+"\n"), got)
	}
}
