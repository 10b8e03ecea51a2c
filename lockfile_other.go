//go:build !unix

package wheelq

import "errors"

// lockFile is a held lock file; there are none on this platform (see
// lockfile_unix.go): a restarted process waits for its former
// incarnation's leases to lapse.
type lockFile struct{}

func defaultLockDir() string { return "" }

func takeLock(dir, ns, token string) (*lockFile, error) {
	return nil, errors.New("lock files are not supported on this platform")
}

func (l *lockFile) gone() []string { return nil }

func (l *lockFile) release() error { return nil }

func (l *lockFile) abandon() {}
