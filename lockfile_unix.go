//go:build unix

package wheelq

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A process of a namespace keeps a lock file, DIR/NAMESPACE/TOKEN.lock
// (DIR is Config.LockDir), locked with flock(2) from before it takes its
// first lease until it has stopped. The kernel drops the lock when the
// process ends, however it ends (kill -9 included), and never while it
// lives (SIGSTOP included). The processes of the namespace on the host
// try to lock the other files of the directory, at Start and then every
// PollInterval: each one they can lock is a process that is gone, whose
// leases and roster place they take over at once instead of waiting up to
// LeaseTTL.

// lockFile is a held lock file.
type lockFile struct {
	f    *os.File
	path string
}

// defaultLockDir is Config.LockDir's default.
func defaultLockDir() string {
	return filepath.Join(os.TempDir(), "wheelq-"+strconv.Itoa(os.Getuid()))
}

// takeLock creates and locks dir/ns/token.lock. A failure is returned
// (the caller goes on without a lock file: a restart waits for its leases
// to lapse).
func takeLock(dir, ns, token string) (*lockFile, error) {
	d := filepath.Join(dir, ns)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return nil, err
	}
	own := filepath.Join(d, token+".lock")
	f, err := os.OpenFile(own, os.O_CREATE|os.O_RDWR|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		_ = os.Remove(own)
		return nil, err
	}
	return &lockFile{f: f, path: own}, nil
}

// gone returns the tokens of the other lock files of l's directory that
// it could lock (their processes are gone), removing those files. Files
// it cannot open are skipped.
func (l *lockFile) gone() []string {
	d := filepath.Dir(l.path)
	entries, err := os.ReadDir(d)
	if err != nil {
		return nil
	}
	var dead []string
	for _, e := range entries {
		name := e.Name()
		tok, ok := strings.CutSuffix(name, ".lock")
		if !ok || e.IsDir() || filepath.Join(d, name) == l.path {
			continue
		}
		if free(filepath.Join(d, name)) {
			dead = append(dead, tok)
		}
	}
	return dead
}

// lockLinger is how long the lock file of a process that is gone stays
// after it was first found free: every process of the namespace on the
// host finds it meanwhile, and takes over the partitions the roster gives
// it from the gone one (not only the first finder), until the gone
// process's leases have lapsed anyway.
const lockLinger = 5 * time.Minute

// free reports whether the process of the lock file at path is gone: the
// file can be locked. The first to find it free writes the time into it;
// one that finds it free lockLinger after that removes it.
func free(path string) bool {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false // held: its process lives
	}
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	if found, err := strconv.ParseInt(strings.TrimSpace(string(b[:n])), 10, 64); err == nil {
		if time.Since(time.Unix(0, found)) > lockLinger {
			_ = os.Remove(path)
		}
	} else {
		_, _ = f.WriteAt([]byte(strconv.FormatInt(time.Now().UnixNano(), 10)+"\n"), 0)
	}
	return true
}

// abandon unlocks the file and leaves it, as the kernel does when its
// process dies (a simulated crash: Config.Testing).
func (l *lockFile) abandon() {
	if l != nil {
		_ = l.f.Close()
	}
}

// release removes and unlocks the file: its process has stopped acting on
// the namespace.
func (l *lockFile) release() error {
	if l == nil {
		return nil
	}
	return errors.Join(os.Remove(l.path), l.f.Close())
}
