package wheel

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newWheel(t testing.TB, cfg Config) *Wheel {
	t.Helper()
	w, err := New(cfg)
	require.NoError(t, err)
	return w
}

func ids(es []Expired) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"tiny tick", Config{Tick: time.Nanosecond}, false},
		{"max below tick", Config{Tick: time.Second, MaxDelay: time.Millisecond}, false},
		{"ten years at 1µs", Config{Tick: time.Microsecond, MaxDelay: 10 * 365 * 24 * time.Hour}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, err := New(tc.cfg)
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.GreaterOrEqual(t, w.Capacity(), 2*w.MaxDelay())
		})
	}
	w := newWheel(t, Config{})
	require.Equal(t, DefaultMaxDelay, w.MaxDelay())
	require.Equal(t, 6, w.Levels())
}

// step is one operation of a table test: add (due >= 0), cancel (due < 0
// with cancel set), or advance to at.
type step struct {
	op   string // "add", "cancel", "resched", "advance"
	id   string
	at   time.Duration
	want []string // for advance: ids expected, in order; for others: the bool result as "true"/"false" or nil
}

func TestWheelTable(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	cases := []struct {
		name  string
		steps []step
	}{
		{"fires in due order, not before", []step{
			{op: "add", id: "c", at: 30 * ms},
			{op: "add", id: "a", at: 10 * ms},
			{op: "add", id: "b", at: 20 * ms},
			{op: "advance", at: 9*ms + 999*time.Microsecond, want: []string{}},
			{op: "advance", at: 10 * ms, want: []string{"a"}},
			{op: "advance", at: 35 * ms, want: []string{"b", "c"}},
		}},
		{"sub-tick precision", []step{
			{op: "add", id: "x", at: 5*ms + 300*time.Microsecond},
			{op: "advance", at: 5*ms + 299*time.Microsecond, want: []string{}},
			{op: "advance", at: 5*ms + 300*time.Microsecond, want: []string{"x"}},
		}},
		{"ties all handed out", []step{ // in an order fixed by the calls (TestTiesDeterministic)
			{op: "add", id: "b", at: 7 * ms},
			{op: "add", id: "a", at: 7 * ms},
			{op: "add", id: "c", at: 7 * ms},
			{op: "add", id: "d", at: 6 * ms},
			{op: "advance", at: 7 * ms, want: []string{"d", "a", "b", "c"}},
		}},
		{"cancel", []step{
			{op: "add", id: "a", at: 10 * ms},
			{op: "add", id: "b", at: 10 * ms},
			{op: "cancel", id: "a", want: []string{"true"}},
			{op: "cancel", id: "a", want: []string{"false"}},
			{op: "advance", at: 20 * ms, want: []string{"b"}},
			{op: "cancel", id: "b", want: []string{"false"}},
		}},
		{"reschedule earlier and later", []step{
			{op: "add", id: "a", at: 10 * time.Second},
			{op: "add", id: "b", at: 5 * ms},
			{op: "resched", id: "a", at: 3 * ms, want: []string{"true"}},
			{op: "resched", id: "b", at: 8 * time.Second, want: []string{"true"}},
			{op: "resched", id: "zz", at: 8 * time.Second, want: []string{"false"}},
			{op: "advance", at: 4 * ms, want: []string{"a"}},
			{op: "advance", at: 8*time.Second - 1, want: []string{}},
			{op: "advance", at: 8 * time.Second, want: []string{"b"}},
		}},
		{"add again moves", []step{
			{op: "add", id: "a", at: 10 * ms},
			{op: "add", id: "a", at: 50 * ms, want: []string{"true"}},
			{op: "advance", at: 49 * ms, want: []string{}},
			{op: "advance", at: 50 * ms, want: []string{"a"}},
		}},
		{"cascade across every level", []step{
			{op: "add", id: "l1", at: 100 * ms},
			{op: "add", id: "l2", at: 5 * time.Second},
			{op: "add", id: "l3", at: 5 * time.Minute},
			{op: "add", id: "l4", at: 3 * time.Hour},
			{op: "add", id: "l5", at: 5 * 24 * time.Hour},
			{op: "add", id: "l6", at: 29 * 24 * time.Hour},
			{op: "advance", at: 100*ms - 1, want: []string{}},
			{op: "advance", at: 2 * time.Hour, want: []string{"l1", "l2", "l3"}},
			{op: "advance", at: 3*time.Hour - 1, want: []string{}},
			{op: "advance", at: 3 * time.Hour, want: []string{"l4"}},
			{op: "advance", at: 29*24*time.Hour - 1, want: []string{"l5"}},
			{op: "advance", at: 30 * 24 * time.Hour, want: []string{"l6"}},
		}},
		{"past due fires at next advance", []step{
			{op: "advance", at: time.Second, want: []string{}},
			{op: "add", id: "late", at: 10 * ms},
			{op: "add", id: "neg", at: -time.Hour},
			{op: "advance", at: time.Second, want: []string{"neg", "late"}},
		}},
		{"wrap-around of the top level over a long run", []step{
			{op: "advance", at: 700 * 24 * time.Hour, want: []string{}},
			{op: "add", id: "a", at: 700*24*time.Hour + 29*24*time.Hour},
			{op: "add", id: "b", at: 700*24*time.Hour + 1},
			{op: "advance", at: 729*24*time.Hour - 1, want: []string{"b"}},
			{op: "advance", at: 729 * 24 * time.Hour, want: []string{"a"}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWheel(t, Config{})
			for i, s := range tc.steps {
				switch s.op {
				case "add":
					replaced, err := w.Add(s.id, s.at)
					require.NoError(t, err, "step %d", i)
					if s.want != nil {
						require.Equal(t, s.want[0], fmt.Sprint(replaced), "step %d", i)
					}
				case "cancel":
					require.Equal(t, s.want[0], fmt.Sprint(w.Cancel(s.id)), "step %d", i)
				case "resched":
					ok, err := w.Reschedule(s.id, s.at)
					require.NoError(t, err)
					require.Equal(t, s.want[0], fmt.Sprint(ok), "step %d", i)
				case "advance":
					got := w.Advance(s.at, nil)
					require.Equal(t, s.want, canonical(got), "step %d", i)
					for _, e := range got {
						require.LessOrEqual(t, e.Due, s.at, "fired early")
					}
				}
				require.NoError(t, w.verify(), "step %d", i)
			}
		})
	}
}

func TestWheelErrors(t *testing.T) {
	t.Parallel()
	w := newWheel(t, Config{MaxDelay: time.Hour})
	_, err := w.Add("", time.Second)
	require.ErrorIs(t, err, ErrEmptyID)
	_, err = w.Add("far", w.Capacity()+time.Millisecond)
	require.ErrorIs(t, err, ErrTooFar)
	_, err = w.Reschedule("far", w.Capacity()+time.Millisecond)
	require.ErrorIs(t, err, ErrTooFar)
	require.Zero(t, w.Len())
	_, err = w.Add("edge", w.Capacity())
	require.NoError(t, err)
	require.Len(t, w.Advance(w.Capacity(), nil), 1)
}

func TestManyInOneSlot(t *testing.T) {
	t.Parallel()
	w := newWheel(t, Config{})
	const n = 10000
	for i := range n {
		_, err := w.Add(fmt.Sprintf("id-%05d", i), time.Duration(n-i)*time.Nanosecond+time.Second)
		require.NoError(t, err)
	}
	require.NoError(t, w.verify())
	for i := 0; i < n; i += 2 {
		require.True(t, w.Cancel(fmt.Sprintf("id-%05d", i)))
	}
	require.NoError(t, w.verify())
	got := w.Advance(2*time.Second, nil)
	require.Len(t, got, n/2)
	for i := 1; i < len(got); i++ {
		require.Less(t, got[i-1].Due, got[i].Due)
	}
	require.Zero(t, w.Len())
	require.NoError(t, w.verify())
}

func TestNextDue(t *testing.T) {
	t.Parallel()
	w := newWheel(t, Config{})
	_, ok := w.NextDue()
	require.False(t, ok)
	_, err := w.Add("a", 3*time.Millisecond+17*time.Microsecond)
	require.NoError(t, err)
	at, ok := w.NextDue()
	require.True(t, ok)
	require.Equal(t, 3*time.Millisecond+17*time.Microsecond, at, "level-0 entries give their exact due")

	_, err = w.Add("b", 2*time.Hour+5*time.Microsecond)
	require.NoError(t, err)
	require.True(t, w.Cancel("a"))
	// Follow NextDue from wake to wake: it is never after the due time and
	// arrives at it exactly after a few cascades.
	wakes := 0
	for {
		at, ok = w.NextDue()
		require.True(t, ok)
		require.LessOrEqual(t, at, 2*time.Hour+5*time.Microsecond)
		got := w.Advance(at, nil)
		wakes++
		if len(got) > 0 {
			require.Equal(t, 2*time.Hour+5*time.Microsecond, at)
			break
		}
	}
	require.LessOrEqual(t, wakes, w.Levels()+1)
}

func TestResetReleases(t *testing.T) {
	t.Parallel()
	w := newWheel(t, Config{})
	for i := range 5000 {
		_, err := w.Add(fmt.Sprint(i), time.Duration(i)*time.Millisecond)
		require.NoError(t, err)
	}
	w.Reset()
	require.Zero(t, w.Len())
	require.Nil(t, w.pages)
	require.Empty(t, w.Advance(time.Hour, nil))
	require.NoError(t, w.verify())
}

func TestCancelledSlotsAreReused(t *testing.T) {
	t.Parallel()
	w := newWheel(t, Config{})
	for i := range 100000 {
		id := fmt.Sprint(i % 7)
		_, err := w.Add(id, time.Duration(i)*time.Microsecond)
		require.NoError(t, err)
		if i%3 == 0 {
			w.Cancel(id)
		}
	}
	require.LessOrEqual(t, int(w.nslab), 7, "cancelled entries must free their slab slots")
	require.LessOrEqual(t, len(w.index), 16)
}

// model is the reference: a container/heap of (due, id) with an index for
// removal.
type model struct {
	items []*modelItem
	byID  map[string]*modelItem
	now   time.Duration
}

type modelItem struct {
	id  string
	due time.Duration
	idx int
}

func (m *model) Len() int { return len(m.items) }
func (m *model) Less(i, j int) bool {
	a, b := m.items[i], m.items[j]
	if a.due != b.due {
		return a.due < b.due
	}
	return a.id < b.id
}
func (m *model) Swap(i, j int) {
	m.items[i], m.items[j] = m.items[j], m.items[i]
	m.items[i].idx, m.items[j].idx = i, j
}
func (m *model) Push(x any) {
	it := x.(*modelItem)
	it.idx = len(m.items)
	m.items = append(m.items, it)
}
func (m *model) Pop() any {
	it := m.items[len(m.items)-1]
	m.items = m.items[:len(m.items)-1]
	return it
}

func (m *model) add(id string, due time.Duration) bool {
	if it, ok := m.byID[id]; ok {
		it.due = due
		heap.Fix(m, it.idx)
		return true
	}
	it := &modelItem{id: id, due: due}
	m.byID[id] = it
	heap.Push(m, it)
	return false
}

func (m *model) cancel(id string) bool {
	it, ok := m.byID[id]
	if !ok {
		return false
	}
	heap.Remove(m, it.idx)
	delete(m.byID, id)
	return true
}

func (m *model) advance(now time.Duration) []string {
	m.now = max(m.now, now)
	out := []string{}
	for len(m.items) > 0 && m.items[0].due <= m.now {
		it := heap.Pop(m).(*modelItem)
		delete(m.byID, it.id)
		out = append(out, it.id)
	}
	return out
}

// runOps interprets data as a sequence of 4-byte operations and checks the
// wheel against the model after each one.
func runOps(t *testing.T, data []byte) {
	w := newWheel(t, Config{Tick: time.Millisecond, MaxDelay: time.Hour})
	m := &model{byID: map[string]*modelItem{}}
	var now time.Duration
	for len(data) >= 4 {
		op, idb, arg := data[0]%8, data[1]%32, binary.LittleEndian.Uint16(data[2:4])
		data = data[4:]
		id := fmt.Sprintf("j%d", idb)
		// Delays span every level: small ones often, large ones sometimes.
		delay := time.Duration(arg) * time.Microsecond
		switch arg % 4 {
		case 1:
			delay = time.Duration(arg) * time.Millisecond
		case 2:
			delay = time.Duration(arg) * 50 * time.Millisecond
		}
		if op == 2 && arg%5 == 0 {
			delay = -delay // in the past
		}
		switch op {
		case 0, 1, 2:
			r1, err := w.Add(id, now+delay)
			require.NoError(t, err)
			require.Equal(t, m.add(id, now+delay), r1, "add %s", id)
		case 3:
			require.Equal(t, m.cancel(id), w.Cancel(id), "cancel %s", id)
		case 4:
			ok, err := w.Reschedule(id, now+delay)
			require.NoError(t, err)
			_, had := m.byID[id]
			if had {
				m.add(id, now+delay)
			}
			require.Equal(t, had, ok, "reschedule %s", id)
		default:
			if next, ok := w.NextDue(); ok && op == 7 {
				now = max(now, next) // jump exactly to the next due time
			} else {
				now += delay
			}
			got := w.Advance(now, nil)
			want := m.advance(now)
			require.Equal(t, want, canonical(got), "advance to %v", now)
		}
		require.NoError(t, w.verify())
		require.Equal(t, m.Len(), w.Len())
	}
	now += 2 * w.Capacity()
	require.Equal(t, m.advance(now), canonical(w.Advance(now, nil)), "final drain")
	require.Zero(t, w.Len())
}

func FuzzWheelAgainstHeap(f *testing.F) {
	f.Add([]byte{0, 1, 10, 0, 5, 0, 20, 0, 0, 2, 5, 1, 7, 0, 0, 0, 3, 1, 0, 0, 6, 0, 255, 255})
	f.Add([]byte{0, 1, 1, 0, 0, 2, 2, 0, 0, 3, 3, 0, 4, 1, 200, 0, 7, 0, 0, 0, 7, 0, 0, 0})
	f.Add([]byte{1, 9, 2, 255, 2, 9, 6, 128, 5, 0, 2, 255, 7, 0, 0, 0, 5, 0, 255, 255})
	f.Fuzz(runOps)
}

// TestRandomOps runs the fuzz body on a fixed pseudo-random corpus so that
// plain `go test` covers long sequences too.
func TestRandomOps(t *testing.T) {
	t.Parallel()
	var x uint64 = 88172645463325252
	for range 200 {
		data := make([]byte, 4*400)
		for i := range data {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			data[i] = byte(x)
		}
		runOps(t, data)
	}
}

// TestMemoryPerEntry pins the heap cost of a pending entry, the id string
// aside: 40 bytes of slab plus 8 bytes per index slot at a load of 3/8 to
// 3/4. It measures allocation, not time, so it is deterministic.
func TestMemoryPerEntry(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a million entries")
	}
	const n = 1_000_000
	ids := makeIDs(n)
	before := heapInUse()
	w := newWheel(t, Config{})
	for i, id := range ids {
		_, err := w.Add(id, time.Hour+time.Duration(i)*time.Millisecond)
		require.NoError(t, err)
	}
	after := heapInUse()
	runtime.KeepAlive(ids)
	perEntry := float64(after-before) / n
	t.Logf("%.1f bytes per pending entry", perEntry)
	require.LessOrEqual(t, perEntry, 64.0)
	require.Equal(t, n, w.Len())

	// Cancelling everything returns the memory to the free list; Reset
	// releases it.
	for _, id := range ids {
		require.True(t, w.Cancel(id))
	}
	w.Reset()
	require.Less(t, float64(int64(heapInUse())-int64(before))/n, 1.0)
	runtime.KeepAlive(w)
}

func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// canonical returns the ids of es, which must be in due order, with the
// ids of entries due at the same time sorted (the model's order); it fails
// the caller's test with a panic if es is not in due order.
func canonical(es []Expired) []string {
	if !slices.IsSortedFunc(es, func(a, b Expired) int { return cmp.Compare(a.Due, b.Due) }) {
		panic(fmt.Sprintf("not in due order: %v", es))
	}
	c := slices.Clone(es)
	slices.SortStableFunc(c, func(a, b Expired) int {
		return cmp.Or(cmp.Compare(a.Due, b.Due), strings.Compare(a.ID, b.ID))
	})
	return ids(c)
}

// TestTiesDeterministic: entries due together come out in the same order
// from two wheels given the same calls.
func TestTiesDeterministic(t *testing.T) {
	t.Parallel()
	run := func() []string {
		w := newWheel(t, Config{Tick: time.Millisecond, MaxDelay: time.Hour})
		for i := range 1000 {
			_, err := w.Add(fmt.Sprintf("k%d", (i*7919)%1000), 3*time.Second)
			require.NoError(t, err)
		}
		got := w.Advance(3*time.Second, nil)
		require.Len(t, got, 1000)
		return ids(got)
	}
	require.Equal(t, run(), run())
}

// TestAdvanceMaxInParts: handing out due entries in parts of any size
// gives the same entries in the same order as Advance at once, never one
// early, with entries added to the slot being handed out between parts;
// the wheel's invariants hold after every part.
func TestAdvanceMaxInParts(t *testing.T) {
	t.Parallel()
	var x uint64 = 2463534242
	rnd := func(n uint64) uint64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return x % n
	}
	for round := range 50 {
		whole, parts := newWheel(t, Config{}), newWheel(t, Config{})
		add := func(id string, due time.Duration) {
			_, err := whole.Add(id, due)
			require.NoError(t, err)
			_, err = parts.Add(id, due)
			require.NoError(t, err)
		}
		// Many entries in a few slots: due within 3 ms, at µs steps, with
		// ties.
		for i := range 300 {
			add(fmt.Sprintf("a%d", i), time.Duration(rnd(3000))*time.Microsecond)
		}
		var got, want []Expired
		last := time.Duration(-1) // the due time of the entry handed out last
		for now := time.Duration(0); now <= 4*time.Millisecond; now += 500 * time.Microsecond {
			want = whole.Advance(now, want)
			for {
				n := len(got)
				var more bool
				got, more = parts.AdvanceMax(now, got, 1+int(rnd(20)))
				require.NoError(t, parts.verify())
				for _, e := range got[n:] {
					require.LessOrEqual(t, e.Due, now, "never early")
					require.GreaterOrEqual(t, e.Due, last, "in due order, across parts too")
					last = e.Due
				}
				if !more {
					break
				}
				// Between parts: a new entry in the slot being handed out
				// (due before the last one out: it comes next).
				if rnd(4) == 0 {
					id := fmt.Sprintf("b%d-%d", round, len(got))
					add(id, now-time.Duration(rnd(400))*time.Microsecond)
					want = whole.Advance(now, want)
					last = -1
				}
			}
			require.Equal(t, whole.Len(), parts.Len())
		}
		require.Equal(t, len(want), len(got))
		gotIDs, wantIDs := ids(got), ids(want)
		slices.Sort(gotIDs)
		slices.Sort(wantIDs)
		require.Equal(t, wantIDs, gotIDs, "the same entries")
	}
}

// TestAdvanceMaxBurst: 100,000 entries due at one instant come out in
// parts of the limit, the first part without taking out the rest.
func TestAdvanceMaxBurst(t *testing.T) {
	t.Parallel()
	w := newWheel(t, Config{})
	const n = 100_000
	for i := range n {
		_, err := w.Add(fmt.Sprintf("j%06d", i), 5*time.Second)
		require.NoError(t, err)
	}
	out, more := w.AdvanceMax(5*time.Second, nil, 512)
	require.Len(t, out, 512)
	require.True(t, more)
	require.Equal(t, n-512, w.Len(), "the rest stays pending")
	total := len(out)
	for more {
		out, more = w.AdvanceMax(5*time.Second, out[:0], 512)
		total += len(out)
	}
	require.Equal(t, n, total)
	require.Zero(t, w.Len())
	require.NoError(t, w.verify())
}

// TestAdvanceMaxBurstWithAdds: entries of a burst that keep coming while
// its slot is handed out in parts keep the slot sorted when they are due
// no later than its head (every part re-sorted a slot of 100,000 before:
// 6 ms each); one due later within the slot's tick clears the mark, and
// the parts stay in due order either way, the invariants holding.
func TestAdvanceMaxBurstWithAdds(t *testing.T) {
	t.Parallel()
	w := newWheel(t, Config{})
	due := 5 * time.Second
	for i := range 2000 {
		_, err := w.Add(fmt.Sprintf("j%06d", i), due)
		require.NoError(t, err)
	}
	out, more := w.AdvanceMax(due, nil, 100)
	require.Len(t, out, 100)
	require.True(t, more)
	b := int(w.cur & slotMask)
	require.NotZero(t, w.sorted0&(1<<b), "a slot handed out in parts is sorted")
	_, err := w.Add("same-instant", due)
	require.NoError(t, err)
	_, err = w.Add("earlier", due-100*time.Microsecond)
	require.NoError(t, err)
	require.NotZero(t, w.sorted0&(1<<b), "entries due no later than the head keep it sorted")
	require.NoError(t, w.verify())
	out, _ = w.AdvanceMax(due, out[:0], 100)
	require.Equal(t, "earlier", out[0].ID, "in due order")
	_, err = w.Add("later", due+300*time.Microsecond) // same 1 ms tick, after the head
	require.NoError(t, err)
	require.Zero(t, w.sorted0&(1<<b), "an entry due after the head clears the mark")
	require.NoError(t, w.verify())
	last := time.Duration(0)
	total := 200 // the two parts above
	for more = true; more; {
		out, more = w.AdvanceMax(due+time.Millisecond, out[:0], 100)
		for _, e := range out {
			require.GreaterOrEqual(t, e.Due, last, "in due order")
			last = e.Due
		}
		total += len(out)
		require.NoError(t, w.verify())
	}
	require.Equal(t, 2003, total)
	require.Zero(t, w.Len())
}

// BenchmarkAdvanceMaxBurstWithAdds: a part of 512 of a slot of 100,000
// entries due at one instant, with an entry of the same instant added
// before each part, as claims of a burst keep coming while it starts.
func BenchmarkAdvanceMaxBurstWithAdds(b *testing.B) {
	b.ReportAllocs()
	const n = 100_000
	due := 5 * time.Second
	ids := make([]string, n+b.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("j%07d", i)
	}
	w, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	for _, id := range ids[:n] {
		if _, err := w.Add(id, due); err != nil {
			b.Fatal(err)
		}
	}
	out, _ := w.AdvanceMax(due, nil, 512)
	b.ResetTimer()
	for i := range b.N {
		if _, err := w.Add(ids[n+i], due); err != nil {
			b.Fatal(err)
		}
		out, _ = w.AdvanceMax(due, out[:0], 512)
		if w.Len() < 1024 {
			b.StopTimer()
			for _, id := range ids[:n] {
				_, _ = w.Add(id, due)
			}
			b.StartTimer()
		}
	}
}
