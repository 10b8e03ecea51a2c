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
				_, err = s.DeclareRecur(ctx, p, name, "S2", read.Spec, read.Watermark, 1500, drop)
			} else {
				_, err = s.RemoveRecur(ctx, p, name, read.Spec, read.Watermark, drop)
			}
			require.ErrorIs(t, err, ErrSpecChanged, "the slots stored moved on since the read")
		})
	}
}
