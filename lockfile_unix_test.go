//go:build unix

package wheelq

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLockFiles: a held lock file is never taken for a gone process's; a
// free one is, by every process that looks during lockLinger, and is
// removed after it; a process that stops removes its own.
func TestLockFiles(t *testing.T) {
	dir := t.TempDir()
	a, err := takeLock(dir, "ns", "tokA")
	require.NoError(t, err)
	b, err := takeLock(dir, "ns", "tokB")
	require.NoError(t, err)
	require.Empty(t, a.gone(), "b lives")
	require.Empty(t, b.gone(), "a lives")
	_, err = takeLock(dir, "ns", "tokA")
	require.Error(t, err, "a token's file is made once")

	// A process killed leaves its file, unlocked by the kernel: a closed
	// file stands for it.
	dead := filepath.Join(dir, "ns", "tokDead.lock")
	require.NoError(t, os.WriteFile(dead, nil, 0o600))
	require.Equal(t, []string{"tokDead"}, a.gone())
	require.Equal(t, []string{"tokDead"}, b.gone(), "found by every process, not only the first")
	require.FileExists(t, dead)
	// First found longer than lockLinger ago: removed.
	old := strconv.FormatInt(time.Now().Add(-lockLinger-time.Minute).UnixNano(), 10)
	require.NoError(t, os.WriteFile(dead, []byte(old), 0o600))
	require.Equal(t, []string{"tokDead"}, a.gone())
	require.NoFileExists(t, dead)

	// A simulated kill (abandon) unlocks and leaves the file, as the kernel
	// does: found free.
	c, err := takeLock(dir, "ns", "tokC")
	require.NoError(t, err)
	c.abandon()
	require.Equal(t, []string{"tokC"}, a.gone())

	require.NoError(t, b.release())
	require.NoFileExists(t, filepath.Join(dir, "ns", "tokB.lock"))
	require.Equal(t, []string{"tokC"}, a.gone(), "b stopped cleanly: no file of its to find")
	require.NoError(t, a.release())
	var none *lockFile
	require.NoError(t, none.release())
}
