package wheel

import (
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"time"
)

// Errors returned by the wheel and the scheduler.
var (
	// ErrEmptyID is returned when an entry is added with an empty id.
	ErrEmptyID = errors.New("wheel: empty id")
	// ErrTooFar is returned when a due time lies beyond the maximum delay.
	ErrTooFar = errors.New("wheel: due time beyond the maximum delay")
	// ErrStopped is returned by a Scheduler that has been stopped.
	ErrStopped = errors.New("wheel: scheduler stopped")
	// ErrNoBackup is returned by NewScheduler when SchedulerConfig.Backup
	// is set but cannot be had: a clock other than RealClock, a system
	// other than Linux, or GOMAXPROCS below 2.
	ErrNoBackup = errors.New("wheel: no backup runner")
	// ErrNoSchedSlice is returned by SetSchedSlice where the kernel
	// cannot be asked for a time slice: a system other than Linux, or a
	// Linux before 6.12.
	ErrNoSchedSlice = errors.New("wheel: no custom scheduler slice")
	// ErrBadSchedSlice is returned by SetSchedSlice for a slice outside
	// [MinSchedSlice, MaxSchedSlice].
	ErrBadSchedSlice = errors.New("wheel: scheduler slice out of range")
)

// The bounds of SetSchedSlice's slice: the kernel's own.
const (
	MinSchedSlice = 100 * time.Microsecond
	MaxSchedSlice = 100 * time.Millisecond
)

// checkSchedSlice refuses a slice SetSchedSlice cannot ask for.
func checkSchedSlice(d time.Duration) error {
	if d < MinSchedSlice || d > MaxSchedSlice {
		return fmt.Errorf("%w: %v (want %v to %v)", ErrBadSchedSlice, d, MinSchedSlice, MaxSchedSlice)
	}
	return nil
}

// Defaults for Config.
const (
	// DefaultTick is the width of a slot of the lowest level. It bounds how
	// many entries share a slot, not the precision: entries fire at their
	// exact due time, not at the end of their slot.
	DefaultTick = time.Millisecond
	// DefaultMaxDelay is the longest delay accepted by default.
	DefaultMaxDelay = 30 * 24 * time.Hour
)

const (
	slotBits      = 6
	slotsPerLevel = 1 << slotBits
	slotMask      = slotsPerLevel - 1
	maxLevels     = 10

	pageBits = 12
	pageSize = 1 << pageBits
	pageMask = pageSize - 1

	none = int32(-1)
)

// Config configures a Wheel. A zero field means its default.
type Config struct {
	// Tick is the width of a lowest-level slot. Default DefaultTick; at
	// least a microsecond.
	Tick time.Duration
	// MaxDelay is the longest delay, measured from the wheel's current
	// time, that Add accepts. Default DefaultMaxDelay. The wheel is built
	// with room for at least twice this (see Capacity), so an owner whose
	// view of the time lags the wheel's a little is never refused.
	MaxDelay time.Duration
}

// Expired is an entry handed back by Advance.
type Expired struct {
	// ID is the entry's id.
	ID string
	// Due is the entry's due time, in the wheel's time.
	Due time.Duration
}

// entry is one pending timer. Entries live in pages of a slab and point to
// each other by index, which keeps them small and free of GC pointers but
// the id. Its size is 40 bytes on 64-bit platforms.
type entry struct {
	id   string
	due  int64 // nanoseconds of wheel time
	next int32 // next in bucket, or next free slab slot
	prev int32
	slot int32 // bucket index (level*slotsPerLevel + slot); none when free
}

// An index slot holds an entry's 32-bit id hash in its high half and its
// slab index + 1 in its low half; zero is empty. Keeping the hash in the
// slot lets a probe skip non-matching entries without touching the slab.
func slotOf(h uint32, i int32) uint64 { return uint64(h)<<32 | uint64(uint32(i+1)) }
func slotHash(v uint64) uint32        { return uint32(v >> 32) }
func slotIndex(v uint64) int32        { return int32(uint32(v)) - 1 }

// Wheel is a hierarchical hashed timing wheel (Varghese & Lauck), with
// levels of 64 slots each: level l has slots 64^l ticks wide. An entry sits
// in the lowest level whose slot can tell it apart from the current tick,
// and moves down (cascades) when time reaches its slot. Entries are
// addressed by a string id through an open-addressing index, so Add, Cancel
// and Reschedule are O(1).
//
// Time is a time.Duration since an origin the owner chooses ("wheel time"),
// normally from a monotonic clock. A Wheel has no goroutine and no lock: it
// does nothing until its owner calls Advance, and it is not safe for
// concurrent use. Scheduler wraps it with a lock, a clock and a goroutine.
//
// A Wheel never hands out an entry early: Advance(now) returns exactly the
// entries due at or before now, in due order, each once. Entries due at
// the same time come out in an order fixed by the sequence of calls.
type Wheel struct {
	tick     int64 // nanoseconds per tick
	maxDelay int64 // nanoseconds
	capacity int64 // structural capacity ahead of cur, nanoseconds
	levels   int

	now int64 // wheel time of the last Advance, nanoseconds
	cur int64 // current tick: every slot before it has been processed

	heads    []int32  // first entry of each bucket, levels*slotsPerLevel
	occupied []uint64 // per level, bit s set when slot s is non-empty

	pages [][]entry
	nslab int32 // slab slots handed out so far
	free  int32 // head of the free list
	count int

	index []uint64 // open addressing, linear probing; see slotOf
	seed  maphash.Seed

	// sorted0 has bit s set while lowest-level slot s is linked in due
	// order (AdvanceMax sorted it to hand out a part of it); place clears
	// it, unlink keeps it.
	sorted0 uint64
	byDue   []dueIndex // AdvanceMax's scratch for sorting a slot
}

// dueIndex is an entry's due time and slab index, sorted by sortSlot.
type dueIndex struct {
	due int64
	i   int32
}

// New returns an empty wheel whose time starts at zero.
func New(cfg Config) (*Wheel, error) {
	if cfg.Tick == 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = DefaultMaxDelay
	}
	if cfg.Tick < time.Microsecond {
		return nil, fmt.Errorf("wheel: tick %v is below 1µs", cfg.Tick)
	}
	if cfg.MaxDelay < cfg.Tick {
		return nil, fmt.Errorf("wheel: max delay %v is below the tick %v", cfg.MaxDelay, cfg.Tick)
	}
	tick := int64(cfg.Tick)
	need := 2*(int64(cfg.MaxDelay)/tick) + 2 // ticks of room wanted ahead of cur
	levels := 1
	for ; levels <= maxLevels; levels++ {
		// The top level wraps around; it can hold 63 of its slots ahead.
		if int64(slotMask)<<(slotBits*(levels-1)) >= need {
			break
		}
	}
	if levels > maxLevels {
		return nil, fmt.Errorf("wheel: max delay %v is too long for tick %v", cfg.MaxDelay, cfg.Tick)
	}
	// Keep wheel times far from overflowing int64 nanoseconds.
	capTicks := min(int64(slotMask)<<(slotBits*(levels-1))-1, math.MaxInt64/4/tick)
	if capTicks < need {
		return nil, fmt.Errorf("wheel: max delay %v is too long", cfg.MaxDelay)
	}
	w := &Wheel{
		tick:     tick,
		maxDelay: int64(cfg.MaxDelay),
		capacity: capTicks * tick,
		levels:   levels,
		seed:     maphash.MakeSeed(),
	}
	w.Reset()
	return w, nil
}

// Reset drops every entry and releases the wheel's memory. The wheel's time
// is kept.
func (w *Wheel) Reset() {
	w.heads = make([]int32, w.levels*slotsPerLevel)
	for i := range w.heads {
		w.heads[i] = none
	}
	w.occupied = make([]uint64, w.levels)
	w.pages = nil
	w.nslab = 0
	w.free = none
	w.count = 0
	w.index = make([]uint64, 16)
	w.sorted0 = 0
	w.byDue = nil
}

// Len returns the number of pending entries.
func (w *Wheel) Len() int { return w.count }

// Now returns the wheel's time: the latest time passed to Advance.
func (w *Wheel) Now() time.Duration { return time.Duration(w.now) }

// MaxDelay returns the longest delay Add accepts past Now.
func (w *Wheel) MaxDelay() time.Duration { return time.Duration(w.maxDelay) }

// Capacity returns how far past Now the wheel's structure can hold an
// entry; it is at least twice MaxDelay.
func (w *Wheel) Capacity() time.Duration { return time.Duration(w.capacity) }

// Levels returns the number of levels the wheel was built with.
func (w *Wheel) Levels() int { return w.levels }

func (w *Wheel) ent(i int32) *entry { return &w.pages[i>>pageBits][i&pageMask] }

// Add puts an entry due at due (wheel time). If id is already pending, the
// entry is moved to the new due time and replaced is true. A due time at or
// before Now is returned by the next Advance. Add fails with ErrEmptyID or
// ErrTooFar (due more than Capacity past Now) and then changes nothing.
func (w *Wheel) Add(id string, due time.Duration) (replaced bool, err error) {
	if err := w.check(id, due); err != nil {
		return false, err
	}
	if (w.count+1)*4 > len(w.index)*3 {
		w.grow()
	}
	h := w.hash(id)
	pos, i := w.lookup(id, h)
	if i != none {
		e := w.ent(i)
		w.unlink(e)
		e.due = int64(due)
		w.place(i, e)
		return true, nil
	}
	i = w.alloc()
	e := w.ent(i)
	*e = entry{id: id, due: int64(due), next: none, prev: none}
	w.place(i, e)
	w.index[pos] = slotOf(h, i)
	w.count++
	return false, nil
}

// Reschedule moves a pending entry to a new due time. It reports whether
// the entry was pending; if it was not, nothing is added.
func (w *Wheel) Reschedule(id string, due time.Duration) (bool, error) {
	if err := w.check(id, due); err != nil {
		return false, err
	}
	_, i := w.lookup(id, w.hash(id))
	if i == none {
		return false, nil
	}
	e := w.ent(i)
	w.unlink(e)
	e.due = int64(due)
	w.place(i, e)
	return true, nil
}

// Cancel removes a pending entry and reports whether it was pending.
func (w *Wheel) Cancel(id string) bool {
	pos, i := w.lookup(id, w.hash(id))
	if i == none {
		return false
	}
	w.remove(pos, i)
	return true
}

// Due returns the due time of a pending entry.
func (w *Wheel) Due(id string) (time.Duration, bool) {
	_, i := w.lookup(id, w.hash(id))
	if i == none {
		return 0, false
	}
	return time.Duration(w.ent(i).due), true
}

func (w *Wheel) check(id string, due time.Duration) error {
	if id == "" {
		return ErrEmptyID
	}
	if int64(due)-w.now > w.capacity {
		return fmt.Errorf("%w: %v ahead, the wheel holds %v", ErrTooFar, time.Duration(int64(due)-w.now), time.Duration(w.capacity))
	}
	return nil
}

// Advance moves the wheel's time to now (time never goes back) and appends
// to dst every entry due at or before now, in due order (entries due at
// the same time in an order fixed by the sequence of calls). The returned entries are no longer pending.
func (w *Wheel) Advance(now time.Duration, dst []Expired) []Expired {
	dst, _ = w.AdvanceMax(now, dst, 0)
	return dst
}

// AdvanceMax is Advance that hands out at most limit entries (limit <= 0:
// no limit), the earliest due, in due order; more reports that entries due
// at or before now are left, for the next call. A burst of 100,000 entries
// due at one instant takes about 20 ms to hand out whole: in parts, the
// first part is out within a millisecond, and the caller's lock is not
// held for all of it.
func (w *Wheel) AdvanceMax(now time.Duration, dst []Expired, limit int) (_ []Expired, more bool) {
	n := int64(now)
	if n < w.now {
		n = w.now
	}
	w.now = n
	target := w.cur
	if n >= 0 {
		target = max(n/w.tick, w.cur)
	}
	budget := math.MaxInt
	if limit > 0 {
		budget = limit
	}
	for w.count > 0 {
		t, _ := w.nextEvent()
		if t > target {
			break
		}
		w.cur = t
		w.cascade()
		upTo := n
		if t < target {
			upTo = math.MaxInt64
		}
		if dst, more = w.expire(dst, upTo, &budget); more {
			return dst, true // w.cur stays at this slot: the rest of it comes next
		}
		if t == target {
			break
		}
	}
	w.cur = target
	return dst, false
}

// NextDue returns the time at which Advance next has work to do: the exact
// due time of the earliest entry when it sits in the lowest level, else the
// start of the tick at which entries must cascade down (which is never after
// the earliest due time). ok is false when the wheel is empty.
func (w *Wheel) NextDue() (at time.Duration, ok bool) {
	if w.count == 0 {
		return 0, false
	}
	t, level0 := w.nextEvent()
	if !level0 {
		return time.Duration(t * w.tick), true
	}
	best := int64(math.MaxInt64)
	for i := w.heads[t&slotMask]; i != none; {
		e := w.ent(i)
		best = min(best, e.due)
		i = e.next
	}
	return time.Duration(best), true
}

// nextEvent returns the first tick at or after cur at which a slot must be
// processed, and whether only the lowest level has work at that tick.
func (w *Wheel) nextEvent() (tick int64, level0Only bool) {
	tick = math.MaxInt64
	for l := 0; l < w.levels; l++ {
		bm := w.occupied[l]
		if bm == 0 {
			continue
		}
		shift := slotBits * l
		digit := int(w.cur>>shift) & slotMask
		var k int64
		if l == 0 {
			k = int64(bits.TrailingZeros64(bits.RotateLeft64(bm, -digit)))
		} else {
			k = int64(bits.TrailingZeros64(bits.RotateLeft64(bm, -(digit+1)))) + 1
		}
		t := ((w.cur >> shift) + k) << shift
		switch {
		case t < tick:
			tick, level0Only = t, l == 0
		case t == tick:
			level0Only = false
		}
	}
	return tick, level0Only
}

// cascade moves down the entries of every higher-level slot that starts at
// the current tick.
func (w *Wheel) cascade() {
	for l := w.levels - 1; l >= 1; l-- {
		shift := slotBits * l
		if w.cur&(1<<shift-1) != 0 {
			continue
		}
		s := int(w.cur>>shift) & slotMask
		if w.occupied[l]&(1<<s) == 0 {
			continue
		}
		b := l*slotsPerLevel + s
		i := w.heads[b]
		w.heads[b] = none
		w.occupied[l] &^= 1 << s
		for i != none {
			e := w.ent(i)
			next := e.next
			w.place(i, e)
			i = next
		}
	}
}

// expire removes the entries of the current lowest-level slot due at or
// before limit, at most *budget of them (the earliest), appends them to dst
// in due order and takes their number from *budget. more reports that
// entries due at or before limit were left for want of budget.
func (w *Wheel) expire(dst []Expired, limit int64, budget *int) (_ []Expired, more bool) {
	b := int(w.cur & slotMask)
	if *budget < math.MaxInt && w.sorted0&(1<<b) == 0 {
		due := 0
		for i := w.heads[b]; i != none; i = w.ent(i).next {
			if w.ent(i).due <= limit {
				due++
			}
		}
		if due > *budget {
			w.sortSlot(b)
		}
	}
	if w.sorted0&(1<<b) != 0 {
		// In due order: take from the head.
		for i := w.heads[b]; i != none && *budget > 0; {
			e := w.ent(i)
			if e.due > limit {
				break
			}
			next := e.next
			dst = append(dst, Expired{ID: e.id, Due: time.Duration(e.due)})
			pos, _ := w.lookup(e.id, w.hash(e.id))
			w.remove(pos, i)
			*budget--
			i = next
		}
		h := w.heads[b]
		return dst, h != none && w.ent(h).due <= limit
	}
	start := len(dst)
	for i := w.heads[b]; i != none; {
		e := w.ent(i)
		next := e.next
		if e.due <= limit {
			dst = append(dst, Expired{ID: e.id, Due: time.Duration(e.due)})
			pos, _ := w.lookup(e.id, w.hash(e.id))
			w.remove(pos, i)
		}
		i = next
	}
	if len(dst)-start > 1 {
		// By due time alone: entries due together (a burst of 50,000)
		// came out 55 ms late when their ids were compared too.
		slices.SortFunc(dst[start:], func(a, b Expired) int { return cmp.Compare(a.Due, b.Due) })
	}
	if *budget < math.MaxInt {
		*budget -= len(dst) - start
	}
	return dst, false
}

// sortSlot links lowest-level slot b in due order (entries due together in
// the order they were linked) and marks it sorted.
func (w *Wheel) sortSlot(b int) {
	n := 0
	for i := w.heads[b]; i != none; i = w.ent(i).next {
		n++
	}
	byDue := w.byDue[:0]
	if cap(byDue) < n {
		byDue = make([]dueIndex, 0, n) // at once, not by doubling
	}
	for i := w.heads[b]; i != none; i = w.ent(i).next {
		byDue = append(byDue, dueIndex{due: w.ent(i).due, i: i})
	}
	// Ties keep their order: by position, which the slice is sorted by
	// already, so a burst due at one instant sorts in linear time.
	slices.SortStableFunc(byDue, func(x, y dueIndex) int { return cmp.Compare(x.due, y.due) })
	prev := none
	for _, d := range byDue {
		e := w.ent(d.i)
		e.prev = prev
		if prev == none {
			w.heads[b] = d.i
		} else {
			w.ent(prev).next = d.i
		}
		prev = d.i
	}
	if prev != none {
		w.ent(prev).next = none
	}
	w.sorted0 |= 1 << b
	clear(byDue)
	if cap(byDue) > 1<<16 {
		byDue = nil // a burst's scratch is not kept
	}
	w.byDue = byDue
}

// place links entry i into the bucket its due time maps to from cur.
func (w *Wheel) place(i int32, e *entry) {
	t := w.cur
	if e.due >= 0 {
		t = max(e.due/w.tick, w.cur)
	}
	l := 0
	if x := uint64(t ^ w.cur); x != 0 {
		l = min((bits.Len64(x)-1)/slotBits, w.levels-1)
	}
	s := int(t>>(slotBits*l)) & slotMask
	b := int32(l*slotsPerLevel + s)
	e.slot = b
	if l == 0 {
		// Linked at the head, the entry keeps a sorted slot sorted when
		// it is due no later than the head: so do the entries of a burst
		// due at one instant that keep coming while the slot is handed
		// out in parts (each part re-sorted a slot of 100,000 entries,
		// 6 ms, before).
		if h := w.heads[b]; h != none && w.ent(h).due < e.due {
			w.sorted0 &^= 1 << s
		}
	}
	e.prev = none
	e.next = w.heads[b]
	if e.next != none {
		w.ent(e.next).prev = i
	}
	w.heads[b] = i
	w.occupied[l] |= 1 << s
}

func (w *Wheel) unlink(e *entry) {
	b := e.slot
	if e.prev != none {
		w.ent(e.prev).next = e.next
	} else {
		w.heads[b] = e.next
	}
	if e.next != none {
		w.ent(e.next).prev = e.prev
	}
	if w.heads[b] == none {
		w.occupied[b/slotsPerLevel] &^= 1 << (b & slotMask)
	}
	e.slot = none
}

func (w *Wheel) alloc() int32 {
	if w.free != none {
		i := w.free
		w.free = w.ent(i).next
		return i
	}
	i := w.nslab
	if int(i)>>pageBits == len(w.pages) {
		w.pages = append(w.pages, make([]entry, pageSize))
	}
	w.nslab++
	return i
}

// remove unlinks entry i, deletes it from the index at pos and frees it.
func (w *Wheel) remove(pos int, i int32) {
	e := w.ent(i)
	w.unlink(e)
	w.deleteAt(pos)
	*e = entry{next: w.free, prev: none, slot: none}
	w.free = i
	w.count--
}

func (w *Wheel) hash(id string) uint32 { return uint32(maphash.String(w.seed, id)) }

// lookup returns the index position of id (or the empty position where it
// would go) and its slab index (none when absent).
func (w *Wheel) lookup(id string, h uint32) (pos int, i int32) {
	mask := len(w.index) - 1
	for p := int(h) & mask; ; p = (p + 1) & mask {
		v := w.index[p]
		if v == 0 {
			return p, none
		}
		if slotHash(v) == h && w.ent(slotIndex(v)).id == id {
			return p, slotIndex(v)
		}
	}
}

// deleteAt empties index position pos, shifting back the entries of its
// probe run (linear probing without tombstones).
func (w *Wheel) deleteAt(pos int) {
	mask := len(w.index) - 1
	i := pos
	for j := (i + 1) & mask; w.index[j] != 0; j = (j + 1) & mask {
		home := int(slotHash(w.index[j])) & mask
		// The entry at j may move to i unless its home lies in (i, j].
		if i <= j {
			if i < home && home <= j {
				continue
			}
		} else if i < home || home <= j {
			continue
		}
		w.index[i] = w.index[j]
		i = j
	}
	w.index[i] = 0
}

func (w *Wheel) grow() {
	old := w.index
	w.index = make([]uint64, 2*len(old))
	mask := len(w.index) - 1
	for _, v := range old {
		if v == 0 {
			continue
		}
		p := int(slotHash(v)) & mask
		for w.index[p] != 0 {
			p = (p + 1) & mask
		}
		w.index[p] = v
	}
}

// verify checks the wheel's invariants; tests call it after every step.
func (w *Wheel) verify() error {
	seen := 0
	for b, head := range w.heads {
		l, s := b/slotsPerLevel, b&slotMask
		if (head != none) != (w.occupied[l]&(1<<s) != 0) {
			return fmt.Errorf("bucket %d: occupied bit disagrees with list", b)
		}
		prev := none
		for i := head; i != none; i = w.ent(i).next {
			e := w.ent(i)
			if l == 0 && w.sorted0&(1<<s) != 0 && prev != none && w.ent(prev).due > e.due {
				return fmt.Errorf("slot %d marked sorted, but %q is due before %q", s, e.id, w.ent(prev).id)
			}
			if e.slot != int32(b) || e.prev != prev {
				return fmt.Errorf("entry %q: slot %d prev %d, want %d %d", e.id, e.slot, e.prev, b, prev)
			}
			if l > 0 && s == int(w.cur>>(slotBits*l))&slotMask {
				return fmt.Errorf("entry %q in level %d slot %d, which time has reached", e.id, l, s)
			}
			if pos, j := w.lookup(e.id, w.hash(e.id)); j != i {
				return fmt.Errorf("entry %q: index has %d at %d, want %d", e.id, j, pos, i)
			}
			prev = i
			seen++
		}
	}
	if seen != w.count {
		return fmt.Errorf("%d entries linked, count %d", seen, w.count)
	}
	filled := 0
	for _, v := range w.index {
		if v != 0 {
			filled++
		}
	}
	if filled != w.count {
		return fmt.Errorf("%d index positions filled, count %d", filled, w.count)
	}
	return nil
}
