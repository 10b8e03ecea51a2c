package persist

import (
	"context"
	"time"
)

// LeaseOp is an operation on a partition lease.
type LeaseOp string

// Lease operations.
const (
	LeaseAcquire LeaseOp = "acquire" // take a free lease, or renew one's own
	LeaseRenew   LeaseOp = "renew"   // extend one's own lease
	LeaseRelease LeaseOp = "release" // give up one's own lease
)

// Lease acquires, renews or releases partition p's lease for token. It
// reports whether the caller holds the lease afterwards (for release:
// whether it held it), and for a failed acquire how long the current
// owner's lease still runs.
func (s *Store) Lease(ctx context.Context, p int, op LeaseOp, token string, ttl time.Duration) (held bool, wait time.Duration, err error) {
	n, err := s.lease.Run(ctx, s.rdb, []string{s.parts[p].Lease}, string(op), token, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, 0, wrap(err)
	}
	if n < 0 {
		return false, time.Duration(-n) * time.Millisecond, nil
	}
	return n == 1, 0, nil
}

// LeaseAll runs op on the leases of the given partitions in one round trip
// and reports, per partition, whether the caller holds the lease. An
// acquire takes over a lease held by one of dead: tokens of owners whose
// processes are known to be gone.
func (s *Store) LeaseAll(ctx context.Context, parts []int, op LeaseOp, token string, ttl time.Duration, dead ...string) ([]bool, error) {
	args := make([][]any, len(s.parts))
	for _, p := range parts {
		args[p] = append(startCall(s.leaseHead, p, 3+len(dead)), string(op), token, ttl.Milliseconds())
		for _, d := range dead {
			args[p] = append(args[p], d)
		}
	}
	replies, err := s.runCalls(ctx, args)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(parts))
	for i, p := range parts {
		n, _ := replies[p].(int64)
		out[i] = n == 1
	}
	return out, nil
}
