package persist

// Repair: the sweep's fixing of inconsistent keys of a partition
// (repair.lua).

import (
	"context"
	_ "embed"
	"fmt"
)

// RepairCursor is where Repair's walk of a partition stands; the zero
// value starts one.
type RepairCursor struct {
	// The SCAN cursors of the pending set, the jobs hash and the claim
	// marks: "" not started, "done" walked whole.
	Pending, Jobs, Running string
	// Done is true when all three walks are done.
	Done bool
}

// RepairResult is what one step of Repair fixed.
type RepairResult struct {
	PendingWithoutRecord int      // pending entries removed: no record
	RecordsInNoSet       int      // records dead-lettered: in neither set
	StaleMarks           int      // claim marks cleared
	Keys                 []string // the job keys fixed
}

// Repair takes one step (about count elements of each structure) of a
// walk of partition p that fixes inconsistent state (see repair.lua):
// pending entries without a record, records in neither set, stale claim
// marks. tok must hold p's lease (ErrFenced otherwise); now (unix µs) is the
// dead-letter score. Call again with the returned cursor until Done.
func (s *Store) Repair(ctx context.Context, p int, tok string, cur RepairCursor, count int, now int64) (RepairCursor, RepairResult, error) {
	arg := func(c string) string {
		if c == "" {
			return "0"
		}
		return c
	}
	k := s.parts[p]
	v, err := s.repair.Run(ctx, s.rdb, []string{k.Pending, k.Jobs, k.Dead, k.Lease, k.Running},
		tok, arg(cur.Pending), arg(cur.Jobs), arg(cur.Running), count, now).Slice()
	if err != nil {
		return cur, RepairResult{}, wrap(err)
	}
	if len(v) < 6 {
		return cur, RepairResult{}, fmt.Errorf("%w: short repair reply", ErrCorrupt)
	}
	next := func(sent string, got any) string {
		g, _ := got.(string)
		if sent == "done" || g == "0" {
			return "done"
		}
		return g
	}
	cur.Pending, cur.Jobs, cur.Running = next(cur.Pending, v[0]), next(cur.Jobs, v[1]), next(cur.Running, v[2])
	cur.Done = cur.Pending == "done" && cur.Jobs == "done" && cur.Running == "done"
	var res RepairResult
	for i, dst := range []*int{&res.PendingWithoutRecord, &res.RecordsInNoSet, &res.StaleMarks} {
		n, _ := v[3+i].(int64)
		*dst = int(n)
	}
	for _, key := range v[6:] {
		if k, ok := key.(string); ok {
			res.Keys = append(res.Keys, k)
		}
	}
	return cur, res, nil
}
