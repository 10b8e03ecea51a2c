package wheelq

import (
	"sync"
	"time"
)

// Jobs due together are claimed earlier: a burst of many jobs due at one
// instant needs time to be claimed (a round trip per maxClaim jobs), and
// claimed ClaimLead before it, most would start late. burstLeads counts
// the jobs armed per 10 ms of due time and gives each job past the first
// burstFree of its bucket an extra lead in proportion to how many came
// before it, at burstClaimRate, up to maxBurstLead; so the claims of a
// burst are spread before its due time and its jobs wait claimed in
// memory for their exact time. A lone job, or a steady stream (W1's 10
// jobs per millisecond), keeps the plain ClaimLead, and so its cancel
// window.
const (
	burstBucket    = 10 * time.Millisecond
	burstFree      = maxClaim // jobs of a bucket armed with the plain lead
	burstClaimRate = 50_000   // jobs per second that claims take at least
	maxBurstLead   = time.Second
	burstSlots     = 4096 // buckets counted at once: 41 s of due times
)

// burstLeads counts armed jobs per bucket of due time, in a ring of slots
// (a slot reused by a later bucket starts again from 0: a count is only
// ever too low, which gives the plain lead). Cancels and reschedules are
// not subtracted: a count is then too high, which claims a few jobs early.
// Its logic needs no clock: it is given due times.
type burstLeads struct {
	mu    sync.Mutex
	slots [burstSlots]burstSlot // guarded by mu
}

type burstSlot struct {
	bucket int64 // the bucket counted: due time / burstBucket
	n      int64
}

// most returns the longest extra lead a job due at dueUs (unix µs) may
// have been armed with: that of the last job counted in its bucket. A
// claim uses it to tell a job claimed early for a burst from one moved
// later since it was armed (a lone job's is 0).
func (b *burstLeads) most(dueUs int64) time.Duration {
	bk := dueUs / burstBucket.Microseconds()
	b.mu.Lock()
	s := b.slots[bk%burstSlots]
	b.mu.Unlock()
	if s.bucket != bk {
		return 0
	}
	return extraLead(s.n)
}

// extraLead is the extra lead of the n-th job of a bucket.
func extraLead(n int64) time.Duration {
	if n <= burstFree {
		return 0
	}
	return min(time.Duration(n-burstFree)*time.Second/burstClaimRate, maxBurstLead)
}

// lead counts one more job due at dueUs (unix µs) and returns the extra
// lead it gets.
func (b *burstLeads) lead(dueUs int64) time.Duration {
	bk := dueUs / burstBucket.Microseconds()
	b.mu.Lock()
	s := &b.slots[bk%burstSlots]
	if s.bucket != bk {
		s.bucket, s.n = bk, 0
	}
	s.n++
	n := s.n
	b.mu.Unlock()
	return extraLead(n)
}
