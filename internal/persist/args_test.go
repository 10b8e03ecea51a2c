package persist

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// BenchmarkPullArgs: the garbage of building a due.lua and a resolve.lua
// call for 10 jobs over 16 partitions (a handout or an ack batch at
// 10,000 jobs a second), without Redis. Run with
//
//	go test ./internal/persist -run '^$' -bench PullArgs -benchmem
func BenchmarkPullArgs(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	s, err := New(rdb, Options{Namespace: "bench", Partitions: 16, HistoryCount: 1000, HistoryAge: 3600e6})
	require.NoError(b, err)
	tokens := make([]string, 16)
	for i := range tokens {
		tokens[i] = "owner-token-0123456789"
	}
	jobs := make([]DueJob, 10)
	ops := make([]ResolveOp, 10)
	for i := range jobs {
		key := JobKey("topic", fmt.Sprintf("job-%08d", i))
		jobs[i] = DueJob{Key: key, Nonce: fmt.Sprintf("nonce.%d", i), Deadline: 1_800_000_000_000_000 + int64(i)}
		ops[i] = ResolveOp{Op: 'a', Key: key, Token: "0000000a" + jobs[i].Nonce}
	}
	b.Run("due", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := s.dueArgs(tokens, 1_800_000_000_000_000, 1_800_000_000_005_000, jobs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("resolve", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := s.resolveArgs(1_800_000_000_000_000, ops); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestPulledCallArgs: a release names its topic's ready ZSET among its
// partition's keys (each ZSET once, in the order of first use), an ack
// names none; every op's arguments are in its partition's place, and the
// order says which op each reply byte is. A version that indexed the
// ready ZSETs by map handed them out the same way; this pins the layout
// that resolve.lua reads.
func TestPulledCallArgs(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	s, err := New(rdb, Options{Namespace: "ns", Partitions: 1})
	require.NoError(t, err)
	ops := []ResolveOp{
		{Op: 'u', Key: JobKey("b", "1"), Token: "0000000aX", Score: 7},
		{Op: 'a', Key: JobKey("a", "2"), Token: "0000000bY"},
		{Op: 'u', Key: JobKey("a", "3"), Token: "0000000cZ", Score: 9},
		{Op: 'u', Key: JobKey("b", "4"), Token: "nothex00W", Score: 11},
	}
	args, order, err := s.resolveArgs(100, ops)
	require.NoError(t, err)
	require.Len(t, args, 1)
	require.Equal(t, [][]int{{0, 1, 2, 3}}, order)
	a := args[0]
	k := s.Keys(0)
	require.Equal(t, []any{"evalsha", s.resolve.Hash(), 10, k.Pending, k.Jobs, k.Running, k.Dead, k.HistoryIdx, k.History, k.Loaded, k.Inbox, k.Ready + "b", k.Ready + "a"}, a[:13])
	argv := a[13:]
	require.Equal(t, []any{int64(100), s.histAge, s.histCount, s.pausedChan, 10, 4}, argv[:6])
	str := func(v any) string {
		switch x := v.(type) {
		case *string:
			return *x
		case *int64:
			return fmt.Sprint(*x)
		}
		return fmt.Sprint(v)
	}
	var got []string
	for _, v := range argv[6:] {
		got = append(got, str(v))
	}
	require.Equal(t, []string{
		"u", "b/1", "0000000aX", "\x00\x00\x00\x0a", "7", "", "9",
		"a", "a/2", "0000000bY", "\x00\x00\x00\x0b", "0", "", "",
		"u", "a/3", "0000000cZ", "\x00\x00\x00\x0c", "9", "", "10",
		"u", "b/4", "nothex00W", "", "11", "", "9",
	}, got)
}
