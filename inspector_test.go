package wheelq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/persist"
)

// listAll pages through List with f and the given page size, and checks
// that every page is in due order and holds at most limit jobs.
func listAll(t *testing.T, q *Queue, f JobFilter, limit int) []JobInfo {
	t.Helper()
	var all []JobInfo
	for cursor, pages := "", 0; ; pages++ {
		require.Less(t, pages, 10000, "List pages end")
		jobs, next, err := q.List(context.Background(), f, cursor, limit)
		require.NoError(t, err)
		require.LessOrEqual(t, len(jobs), cmp.Or(limit, DefaultListLimit))
		all = append(all, jobs...)
		if next == "" {
			break
		}
		cursor = next
	}
	return all
}

func inDueOrder(t *testing.T, jobs []JobInfo) {
	t.Helper()
	require.True(t, slices.IsSortedFunc(jobs, func(a, b JobInfo) int {
		return cmp.Or(a.Due.Compare(b.Due), cmp.Compare(a.Topic+"/"+a.ID, b.Topic+"/"+b.ID))
	}), "in due order")
}

func ids(jobs []JobInfo) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.Topic + "/" + j.ID
	}
	return out
}

// TestListMergesPartitionsInDueOrder: jobs of two topics spread over the
// partitions are listed page by page in due order, each once, whatever the
// page size; a topic filter and a due window select what they say, and
// jobs that share a due time are neither lost nor repeated across pages.
func TestListMergesPartitionsInDueOrder(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{Partitions: 8})
		base := time.Now().Add(time.Hour).Truncate(time.Second)
		want := map[string]time.Time{}
		for i := range 60 {
			topic := "a"
			if i%3 == 0 {
				topic = "b"
			}
			due := base.Add(time.Duration(i/2) * time.Second) // pairs share a due time
			id := fmt.Sprintf("j%02d", i)
			_, err := b.q.Schedule(b.ctx, topic, []byte(id), ID(id), At(due))
			require.NoError(t, err)
			want[topic+"/"+id] = due
		}
		for _, limit := range []int{0, 1, 7, 60, 1000} {
			all := listAll(t, b.q, JobFilter{}, limit)
			inDueOrder(t, all)
			require.Len(t, all, 60, "limit %d", limit)
			for _, j := range all {
				require.True(t, want[j.Topic+"/"+j.ID].Equal(j.Due), "%s/%s due", j.Topic, j.ID)
				require.Equal(t, StatePending, j.State)
				require.Equal(t, j.ID, string(j.Payload))
			}
			require.Len(t, slices.Compact(slices.Sorted(slices.Values(ids(all)))), 60, "each once")
		}
		bs := listAll(t, b.q, JobFilter{Topic: "b"}, 4)
		require.Len(t, bs, 20)
		for _, j := range bs {
			require.Equal(t, "b", j.Topic)
		}
		inDueOrder(t, bs)
		// A window: [base+10s, base+20s) holds the jobs 20 to 39.
		win := listAll(t, b.q, JobFilter{DueAfter: base.Add(10 * time.Second), DueBefore: base.Add(20 * time.Second)}, 3)
		require.Len(t, win, 20)
		for _, j := range win {
			require.False(t, j.Due.Before(base.Add(10*time.Second)))
			require.True(t, j.Due.Before(base.Add(20*time.Second)))
		}
		none, next, err := b.q.List(b.ctx, JobFilter{Overdue: true}, "", 10)
		require.NoError(t, err)
		require.Empty(t, none, "nothing overdue")
		require.Empty(t, next)
	})
}

// TestListCursorOnlyWhenMoreFollows: List gives a cursor only when a job
// follows the page: a page that is exactly full and ends the listing
// (a partition holding exactly limit jobs of it) comes back with no
// cursor, so paging with any limit never ends on an empty page. Before,
// List read limit members of a partition and took a full read for "more
// to read", and `wheelq ls -limit 1` of one job said "more".
func TestListCursorOnlyWhenMoreFollows(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		for _, parts := range []int{1, 8} {
			b := d.setup(t, Config{Partitions: parts})
			base := time.Now().Add(time.Hour)
			for i := range 5 {
				topic := []string{"a", "b"}[i%2] // a: 0, 2, 4; b: 1, 3
				_, err := b.q.Schedule(b.ctx, topic, nil, ID(fmt.Sprint(i)), At(base.Add(time.Duration(i)*time.Second)))
				require.NoError(t, err)
			}
			for _, c := range []struct {
				f JobFilter
				n int
			}{{JobFilter{}, 5}, {JobFilter{Topic: "a"}, 3}, {JobFilter{Topic: "b"}, 2}} {
				for limit := 1; limit <= 6; limit++ {
					var all []JobInfo
					pages := 0
					for cursor := ""; ; {
						jobs, next, err := b.q.List(b.ctx, c.f, cursor, limit)
						require.NoError(t, err)
						pages++
						require.NotEmpty(t, jobs, "%d partitions, %+v, limit %d: page %d is empty", parts, c.f, limit, pages)
						all = append(all, jobs...)
						if next == "" {
							break
						}
						require.Less(t, len(all), c.n, "%d partitions, %+v, limit %d: a cursor after the last job", parts, c.f, limit)
						cursor = next
					}
					require.Len(t, all, c.n, "%d partitions, %+v, limit %d", parts, c.f, limit)
					require.Equal(t, (c.n+limit-1)/limit, pages, "%d partitions, %+v, limit %d: full pages", parts, c.f, limit)
				}
			}
		}
	})
}

// TestListBadInput: bad filters, limits and cursors are errors that say
// so, never a panic or a silent default.
func TestListBadInput(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		now := time.Now()
		for name, c := range map[string]struct {
			f      JobFilter
			cursor string
			limit  int
			want   error
		}{
			"negative limit": {limit: -1, want: ErrInvalidOption},
			"huge limit":     {limit: MaxListLimit + 1, want: ErrInvalidOption},
			"window":         {f: JobFilter{DueAfter: now, DueBefore: now.Add(-time.Second)}, want: ErrInvalidOption},
			"state":          {f: JobFilter{State: StateDone}, want: ErrInvalidOption},
			"overdue dead":   {f: JobFilter{State: StateDead, Overdue: true}, want: ErrInvalidOption},
			"topic":          {f: JobFilter{Topic: "a/b"}, want: ErrInvalidTopic},
			"cursor":         {cursor: "not-a-cursor", want: ErrInvalidCursor},
			"cursor base64":  {cursor: "MTp4Onk", want: ErrInvalidCursor}, // "1:x:y"
		} {
			var err error
			require.NotPanics(t, func() { _, _, err = b.q.List(b.ctx, c.f, c.cursor, c.limit) }, name)
			require.ErrorIs(t, err, c.want, name)
		}
		_, err := b.q.CancelWhere(b.ctx, JobFilter{State: JobState(99)})
		require.ErrorIs(t, err, ErrInvalidOption)
		_, err = b.q.RequeueWhere(b.ctx, JobFilter{State: StatePending}, now)
		require.ErrorIs(t, err, ErrInvalidOption)
		require.ErrorIs(t, b.q.RunNow(b.ctx, "", "x"), ErrInvalidTopic)
		require.ErrorIs(t, b.q.RunNow(b.ctx, "t", "missing"), ErrNotFound)
	})
}

// TestInspectorStates: a running job is listed as running (under pending
// and under running), counted per topic; overdue jobs (stored by a
// producer, no worker running) are listed and counted as overdue;
// CancelWhere cancels exactly what its filter selects; RunNow makes a
// job due now; dead jobs are requeued in bulk by RequeueWhere.
func TestInspectorStates(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{MaxAttempts: 1})
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		require.NoError(t, b.q.Handle("slow", HandlerFunc(func(ctx context.Context, j *Job) error {
			started <- struct{}{}
			<-release
			return nil
		})))
		require.NoError(t, b.q.Handle("bad", HandlerFunc(func(ctx context.Context, j *Job) error {
			return errors.New("bad job")
		})))
		_, err := b.q.Schedule(b.ctx, "slow", nil, ID("r"))
		require.NoError(t, err)
		<-started
		defer close(release)
		for i := range 5 {
			_, err := b.q.Schedule(b.ctx, "bad", nil, ID(fmt.Sprint(i)))
			require.NoError(t, err)
		}
		eventually(t, func() bool {
			d, err := b.q.DeadJobs(b.ctx, 10)
			require.NoError(t, err)
			return len(d) == 5
		}, "dead-lettered")

		// A producer in a namespace of its own leaves overdue jobs: nothing runs them.
		prod := b.newQueue(t, Config{Namespace: cmp.Or(b.ns, "default") + "-producer"})
		for i := range 12 {
			topic := []string{"x", "y"}[i%2]
			_, err := prod.Schedule(b.ctx, topic, nil, ID(fmt.Sprint(i)), At(time.Now().Add(-time.Duration(i+2)*time.Second)))
			require.NoError(t, err)
		}
		_, err = prod.Schedule(b.ctx, "x", nil, ID("later"), After(time.Hour))
		require.NoError(t, err)

		running := listAll(t, b.q, JobFilter{State: StateRunning}, 10)
		require.Equal(t, []string{"slow/r"}, ids(running))
		require.Equal(t, StateRunning, running[0].State)
		pend := listAll(t, b.q, JobFilter{Topic: "slow"}, 10)
		require.Len(t, pend, 1)
		require.Equal(t, StateRunning, pend[0].State, "a pending job with a run claimed says so")
		dead := listAll(t, b.q, JobFilter{State: StateDead, Topic: "bad"}, 2)
		require.Len(t, dead, 5)
		for _, j := range dead {
			require.Equal(t, StateDead, j.State)
			require.Equal(t, "bad job", j.LastError)
		}
		counts, err := b.q.Counts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, []TopicCounts{{Topic: "bad", Dead: 5}, {Topic: "slow", Pending: 1, Running: 1}}, counts)

		over := listAll(t, prod, JobFilter{Overdue: true, Topic: "x"}, 4)
		require.Len(t, over, 6)
		inDueOrder(t, over)
		counts, err = prod.Counts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, []TopicCounts{{Topic: "x", Pending: 7, Overdue: 6}, {Topic: "y", Pending: 6, Overdue: 6}}, counts)
		n, err := prod.CancelWhere(b.ctx, JobFilter{Topic: "x", Overdue: true})
		require.NoError(t, err)
		require.Equal(t, 6, n)
		require.NoError(t, prod.RunNow(b.ctx, "x", "later"))
		info, err := prod.Lookup(b.ctx, "x", "later")
		require.NoError(t, err)
		require.Less(t, time.Until(info.Due), time.Minute, "due now")
		n, err = prod.CancelWhere(b.ctx, JobFilter{})
		require.NoError(t, err)
		require.Equal(t, 7, n, "the rest: x/later and the six of y")
		counts, err = prod.Counts(b.ctx)
		require.NoError(t, err)
		require.Empty(t, counts)

		n, err = b.q.RequeueWhere(b.ctx, JobFilter{Topic: "bad", DueBefore: time.Now().Add(time.Minute)}, time.Now().Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, 5, n)
		counts, err = b.q.Counts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, TopicCounts{Topic: "bad", Pending: 5}, counts[0], "requeued, due in an hour")
		n, err = b.q.RequeueWhere(b.ctx, JobFilter{}, time.Now())
		require.NoError(t, err)
		require.Zero(t, n, "no dead job left")
	})
}

// TestListTopicPastScanBudget: a rare topic among more jobs than one List
// reads of a partition is still listed whole, in order and each job once
// (some pages come back short, with a cursor that goes on) when the
// partitions' reading stops at different places; and Counts tallies sets
// larger than one of its pages.
func TestListTopicPastScanBudget(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Partitions: 2})
	base := time.Now().Add(time.Hour)
	// idsIn returns n ids of topic whose jobs fall in partition p.
	idsIn := func(topic string, p, n int) []string {
		var out []string
		for i := 0; len(out) < n; i++ {
			if b.q.store.PartitionOf(persist.JobKey(topic, fmt.Sprint(i))) == p {
				out = append(out, fmt.Sprint(i))
			}
		}
		return out
	}
	// Partition 0 holds many jobs, partition 1 none: a List by topic stops
	// reading partition 0 after listScanBudget of them, and reads
	// partition 1 whole.
	const many = 4 * listScanBudget
	manyIDs := idsIn("many", 0, many)
	errs := make(chan error, 16)
	for g := range 16 {
		go func() {
			for i := g; i < many; i += 16 {
				_, err := b.q.Schedule(b.ctx, "many", nil, ID(manyIDs[i]), At(base.Add(time.Duration(i)*time.Millisecond)))
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 16 {
		require.NoError(t, <-errs)
	}
	rare0, rare1 := idsIn("rare", 0, 2), idsIn("rare", 1, 2)
	for _, r := range []struct {
		id string
		at int
	}{{rare0[0], 100}, {rare0[1], many - 100}, {rare1[0], 200}, {rare1[1], many - 50}} {
		_, err := b.q.Schedule(b.ctx, "rare", nil, ID(r.id), At(base.Add(time.Duration(r.at)*time.Millisecond)))
		require.NoError(t, err)
	}
	rare := listAll(t, b.q, JobFilter{Topic: "rare"}, 3)
	require.Equal(t, []string{"rare/" + rare0[0], "rare/" + rare1[0], "rare/" + rare0[1], "rare/" + rare1[1]}, ids(rare))
	counts, err := b.q.Counts(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []TopicCounts{{Topic: "many", Pending: many}, {Topic: "rare", Pending: 4}}, counts)
}

// BenchmarkInspector measures the inspector against a real redis-server
// holding 200,000 pending jobs in 16 partitions (1% of them of a rare
// topic, due over the next hour): Counts, a page of 100 of List without
// a filter, by the rare topic, and of the running jobs. Run with
//
//	go test -run '^$' -bench Inspector -benchtime 20x .
func BenchmarkInspector(b *testing.B) {
	q, ctx := benchQueue(b)
	const n = 200_000
	var next atomic.Int64
	errs := make(chan error, 32)
	for range 32 {
		go func() {
			for i := next.Add(1); i <= n; i = next.Add(1) {
				topic := "common"
				if i%100 == 0 {
					topic = "rare"
				}
				_, err := q.Schedule(ctx, topic, make([]byte, 64), After(time.Duration(i)*time.Hour/n+time.Minute))
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 32 {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		f    func() error
	}{
		{"Counts", func() error { _, err := q.Counts(ctx); return err }},
		{"List", func() error { _, _, err := q.List(ctx, JobFilter{}, "", 100); return err }},
		{"ListRareTopic", func() error { _, _, err := q.List(ctx, JobFilter{Topic: "rare"}, "", 100); return err }},
		{"ListRunning", func() error { _, _, err := q.List(ctx, JobFilter{State: StateRunning}, "", 100); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestLookupRunning: Lookup said pending for a job whose
// handler was running (List, Counts and ls -state running said running),
// with Attempts 0 during its first run. Both now say running, and the run
// in progress counts as an attempt.
func TestLookupRunning(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	started, release := make(chan struct{}), make(chan struct{})
	require.NoError(t, b.q.Handle("slow", HandlerFunc(func(ctx context.Context, j *Job) error {
		close(started)
		<-release
		return nil
	})))
	_, err := b.q.Schedule(b.ctx, "slow", nil, ID("s1"))
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("the handler did not start")
	}
	j, err := b.q.Lookup(b.ctx, "slow", "s1")
	require.NoError(t, err)
	require.Equal(t, StateRunning, j.State)
	require.Equal(t, 1, j.Attempts, "the first run is under way")
	listed, _, err := b.q.List(b.ctx, JobFilter{Topic: "slow", State: StateRunning}, "", 10)
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, j.State, listed[0].State)
	require.Equal(t, j.Attempts, listed[0].Attempts, "Lookup and List agree")
	close(release)
	eventually(t, func() bool {
		j, err := b.q.Lookup(b.ctx, "slow", "s1")
		return err == nil && j.State == StateDone && j.Attempts == 1
	}, "done after one attempt")
}
