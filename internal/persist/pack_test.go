package persist

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// packBackends runs f on a real redis-server (or redistest's fallback),
// alone and as in a cluster (a call per partition), and on miniredis (the
// embedded Redis of the quickstart, whose Lua lacks the struct library):
// claim.lua and settle.lua decode their packed arguments on all of them.
func packBackends(t *testing.T, parts int, f func(t *testing.T, b *bundle)) {
	for _, name := range []string{"redis", "cluster", "miniredis"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var b *bundle
			if name == "miniredis" {
				m := miniredis.RunT(t)
				rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
				t.Cleanup(func() { _ = rdb.Close() })
				s, err := New(rdb, Options{Namespace: "t", Partitions: parts})
				require.NoError(t, err)
				b = &bundle{rdb: rdb, store: s, ctx: context.Background()}
				require.NoError(t, s.Init(b.ctx))
			} else {
				b = setup(t, parts)
				b.store.cluster = name == "cluster"
			}
			f(t, b)
		})
	}
}

// awkwardKeys are job keys that a packed argument must carry intact: an
// empty id, binary bytes, commas and line ends (the reply's separators
// and RESP's), a key longer than 64 KiB.
func awkwardKeys() []string {
	return []string{
		"a/",
		"a/\x00\xff\x01,\r\n",
		"a/,,,",
		"a/" + strings.Repeat("k,\x00", 30_000),
		"a/plain",
		"",
	}
}

// TestClaimPackedAwkward: a claim packs its jobs into one argument per
// partition; awkward keys, records of 0 bytes and of more than 64 KiB,
// expected due times that match the score, differ from it, or are not
// given, all come back as they are stored.
func TestClaimPackedAwkward(t *testing.T) {
	t.Parallel()
	packBackends(t, 3, func(t *testing.T, b *bundle) {
		big := rec(strings.Repeat("x", 70<<10))
		var ws []Write
		for i, k := range awkwardKeys() {
			r := rec(fmt.Sprint(i))
			switch i {
			case 1:
				r = big
			case 2:
				r = []byte{} // not a record: claim returns it as it is
			}
			ws = append(ws, Write{Key: k, Due: 1_764_000_000_000_000 + int64(i), Record: r, Replace: true})
		}
		_, err := b.store.Write(b.ctx, nil, ws)
		require.NoError(t, err)
		var reqs []ClaimRequest
		for i, w := range ws {
			r := ClaimRequest{Key: w.Key}
			switch i % 3 {
			case 0:
				r.Due = w.Due // expected right
			case 1:
				r.Due = w.Due - 7 // rescheduled since: the score is returned
			}
			if i >= 3 {
				r.Rev, r.HaveRev = 1, true
			}
			reqs = append(reqs, r)
		}
		reqs = append(reqs, ClaimRequest{Key: "a/missing", Due: 5}, ClaimRequest{Key: "a/missing2"})
		res, err := b.store.Claim(b.ctx, []string{"", "", ""}, reqs, nil)
		require.NoError(t, err)
		require.Len(t, res, len(reqs))
		for i, w := range ws {
			r := res[i]
			require.False(t, r.Gone || r.Busy || r.Deferred || r.Paused, "job %d: %+v", i, r)
			require.Equal(t, w.Due, r.Due, "job %d: its score, whatever the caller expected", i)
			if i >= 3 {
				require.Nil(t, r.Record, "job %d: the caller's revision is current", i)
			} else {
				require.Equal(t, w.Record, r.Record, "job %d: its record", i)
			}
		}
		require.True(t, res[len(ws)].Gone)
		require.True(t, res[len(ws)+1].Gone)
		// Claimed: marked running under each key, byte for byte.
		for _, w := range ws {
			ch, err := b.store.Cancel(b.ctx, w.Key)
			require.NoError(t, err)
			require.Equal(t, ChangedWhileRunning, ch, "key %q", w.Key[:min(len(w.Key), 12)])
		}
	})
}
