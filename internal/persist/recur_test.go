package persist

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReplacingRecurAfterAFill: a declare (or a remove) carries the
// watermark it computed its drops from; when the owner's fill stored a
// further slot meanwhile, it is refused (ErrSpecChanged: read again)
// rather than leave that slot of the old schedule to run after the
// replacement. (Found by an audit as a suspicion; reproduced here.)
func TestReplacingRecurAfterAFill(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	s, ctx := b.store, b.ctx
	for _, op := range []string{"declare", "remove"} {
		t.Run(op, func(t *testing.T) {
			// Two slot keys of one partition.
			var keys []string
			p := -1
			for i := 0; len(keys) < 2; i++ {
				k := JobKey("beat", fmt.Sprintf("%s@%d", op, i))
				if p < 0 {
					p = s.PartitionOf(k)
				}
				if s.PartitionOf(k) == p {
					keys = append(keys, k)
				}
			}
			name := "n-" + op
			_, err := s.DeclareRecur(ctx, p, name, "S1", "", 0, 0, nil)
			require.NoError(t, err)
			_, err = s.FillRecur(ctx, p, "", name, "S1", 0, []Slot{{Due: 1000, Key: keys[0], Record: rec("1")}})
			require.NoError(t, err)
			read, err := s.RecurOf(ctx, p, name)
			require.NoError(t, err)
			require.Equal(t, int64(1000), read.Watermark)
			// The owner's fill stores the next slot after the read.
			_, err = s.FillRecur(ctx, p, "", name, "S1", 0, []Slot{{Due: 2000, Key: keys[1], Record: rec("2")}})
			require.NoError(t, err)
			drop := []string{keys[0]} // what the read said was stored
			if op == "declare" {
				_, err = s.DeclareRecur(ctx, p, name, "S2", read.Spec, read.Watermark, 1500, []Slot{{Due: 1000, Key: keys[0]}})
			} else {
				_, err = s.RemoveRecur(ctx, p, name, read.Spec, read.Watermark, drop)
			}
			require.ErrorIs(t, err, ErrSpecChanged, "the slots stored moved on since the read")
		})
	}
}

// TestRecurDoneSlots: the slots a replaced spec had stored that are gone
// (ran early, or were cancelled) or claimed are not stored again by the
// new spec's fill; the others are dropped and stored again; the record of
// them goes once the watermark passes them, and with the schedule.
func TestRecurDoneSlots(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	s, ctx := b.store, b.ctx
	keys := []string{JobKey("beat", "n@1"), JobKey("beat", "n@2"), JobKey("beat", "n@3")}
	_, err := s.DeclareRecur(ctx, 0, "n", "S1", "", 0, 0, nil)
	require.NoError(t, err)
	stored, err := s.FillRecur(ctx, 0, "", "n", "S1", 0, []Slot{
		{Due: 1000, Key: keys[0], Record: rec("1")}, {Due: 2000, Key: keys[1], Record: rec("2")}, {Due: 3000, Key: keys[2], Record: rec("3")}})
	require.NoError(t, err)
	require.Len(t, stored, 3)
	// Slot 2000 ran (its job is gone); 1000 and 3000 are pending.
	require.NoError(t, b.rdb.HDel(ctx, s.Keys(0).Jobs, keys[1]).Err())
	require.NoError(t, b.rdb.ZRem(ctx, s.Keys(0).Pending, keys[1]).Err())
	read, err := s.RecurOf(ctx, 0, "n")
	require.NoError(t, err)
	changed, err := s.DeclareRecur(ctx, 0, "n", "S2", "S1", read.Watermark, 500,
		[]Slot{{Due: 1000, Key: keys[0]}, {Due: 2000, Key: keys[1]}, {Due: 3000, Key: keys[2]}})
	require.NoError(t, err)
	require.True(t, changed)
	n, err := b.rdb.HLen(ctx, s.Keys(0).Jobs).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the pending slots were dropped")
	require.Equal(t, "2000", b.rdb.HGet(ctx, s.Keys(0).RecurState, "n\x00d").Val())
	stored, err = s.FillRecur(ctx, 0, "", "n", "S2", 0, []Slot{
		{Due: 1000, Key: keys[0], Record: rec("1")}, {Due: 2000, Key: keys[1], Record: rec("2")}})
	require.NoError(t, err)
	require.Equal(t, []string{keys[0]}, stored, "the slot that ran is passed over")
	require.Zero(t, b.rdb.HExists(ctx, s.Keys(0).RecurState, "n\x00d").Val(), "passed: forgotten")
	read, err = s.RecurOf(ctx, 0, "n")
	require.NoError(t, err)
	require.Equal(t, int64(2000), read.Watermark)
	_, err = s.DeclareRecur(ctx, 0, "n", "S3", "S2", read.Watermark, 500, []Slot{{Due: 1000, Key: keys[0]}, {Due: 2000, Key: keys[1]}})
	require.NoError(t, err)
	require.Equal(t, "2000", b.rdb.HGet(ctx, s.Keys(0).RecurState, "n\x00d").Val(), "the slot that ran, not the one dropped")
	ok, err := s.RemoveRecur(ctx, 0, "n", "S3", 500, nil)
	require.NoError(t, err)
	require.True(t, ok)
	require.Zero(t, b.rdb.HExists(ctx, s.Keys(0).RecurState, "n\x00d").Val(), "removed with the schedule")
}
