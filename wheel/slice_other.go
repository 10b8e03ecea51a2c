//go:build !linux

package wheel

import (
	"fmt"
	"time"
)

// SetSchedSlice asks the kernel for a time slice of d for every thread of
// the process; only Linux 6.12 and later can be asked, so here it returns
// ErrNoSchedSlice (or ErrBadSchedSlice for a d out of range).
func SetSchedSlice(d time.Duration) error {
	if err := checkSchedSlice(d); err != nil {
		return err
	}
	return fmt.Errorf("%w: not on this system", ErrNoSchedSlice)
}
