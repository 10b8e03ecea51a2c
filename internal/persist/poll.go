package persist

// Polling: poll.lua brings the jobs of an owner's coming window and its
// inbox, renews its lease and announces its loaded-until time, for many
// partitions in one round trip.

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq/internal/errs"
)

// PollResult is what Poll hands back.
type PollResult struct {
	// Prev is the loaded-until time announced before this poll (unix µs);
	// HavePrev is false on a reset or when none was announced (or it
	// lapsed), and the caller must then scan from the beginning.
	Prev     int64
	HavePrev bool
	// Inbox holds jobs scheduled by others into the loaded window.
	Inbox []Entry
	// InboxMore says the inbox held the most entries asked for, or more:
	// poll again (a page size of 0 reads no window) to take the rest.
	InboxMore bool
}

// Poll announces partition p's new loaded-until time (unix µs) for the
// lease holder tok, and takes up to maxInbox entries from its inbox. With
// reset (on taking the partition over) the inbox is dropped instead: the
// caller scans everything up to loaded. The announcement lapses after ttl
// unless renewed. It fails with ErrFenced when tok does not hold the lease.
// It is PollMany for one partition, reading no page.
func (s *Store) Poll(ctx context.Context, p int, tok string, loaded int64, ttl time.Duration, reset bool, maxInbox int) (PollResult, error) {
	var out [1]PollReply
	if _, err := s.PollMany(ctx, loaded, ttl, maxInbox, 0, []PollRequest{{P: p, Token: tok, Reset: reset}}, out[:0]); err != nil {
		return PollResult{}, err
	}
	return out[0].PollResult, out[0].Err
}

// PollFloor is the start of a window that has no previous announcement
// (PollMany): below every due time.
const PollFloor = math.MinInt64 / 2

// PollRequest is one partition's part of a PollMany call.
type PollRequest struct {
	P     int    // the partition
	Token string // the caller's lease token
	// Reset is set on taking the partition over: its inbox and the claim
	// markers of the previous owner's runs are dropped, and its window
	// starts at PollFloor.
	Reset bool
	// Scanned is where the caller's last window of P scanned whole ended
	// (unix µs; PollFloor for none): the window starts at the earlier of it
	// and the previous announcement.
	Scanned int64
}

// PollReply is what PollMany hands back for one partition.
type PollReply struct {
	PollResult
	// Read says whether the window's first page was read: the window
	// (start, loaded] is not empty and PollMany was asked for pages. Page
	// holds its jobs in due order, and Cursor continues the window with
	// RangePending (Done when it was read whole).
	Read   bool
	Page   []Entry
	Cursor Cursor
	// Err is the partition's failure, and the rest of its reply is then
	// void: ErrFenced when the caller does not hold its lease, else the
	// error of its step or of the round trip that carried it.
	Err error
}

// PollMany is the poller's step for the partitions of reqs, in one round
// trip outside a Cluster (in a Cluster, one call per partition, pipelined):
// for each, it announces its new loaded-until time loaded (unix µs), which
// lapses after ttl unless renewed, takes up to maxInbox entries from its
// inbox (a reset drops them: see PollRequest), and reads up to pageSize
// pending jobs (none if 0) of its window: after the earlier of the
// previous announcement and the request's Scanned (PollFloor when there
// is no previous announcement), up to loaded. Each partition is done on its
// own: one that fails or is fenced leaves the others as they are, and its
// reply's Err says why. out[:0] is reused for the replies, one per
// request, in order. The error is for bad arguments only.
func (s *Store) PollMany(ctx context.Context, loaded int64, ttl time.Duration, maxInbox, pageSize int, reqs []PollRequest, out []PollReply) ([]PollReply, error) {
	if maxInbox < 0 || pageSize < 0 {
		return out[:0], errs.Errorf("wheelq: poll with inbox %d, page %d: want >= 0", maxInbox, pageSize)
	}
	for _, r := range reqs {
		if r.P < 0 || r.P >= len(s.parts) {
			return out[:0], errs.Errorf("wheelq: poll of partition %d of %d", r.P, len(s.parts))
		}
	}
	out = slices.Grow(out[:0], len(reqs))[:len(reqs)]
	clear(out)
	if len(reqs) == 0 {
		return out, nil
	}
	fixed := [...]any{loaded, ttl.Milliseconds(), maxInbox, pageSize, PollFloor}
	per := 1
	if !s.cluster {
		per = len(reqs)
	}
	n := (len(reqs) + per - 1) / per
	calls, bufs := make([][]any, 0, n), make([]*[]any, 0, n)
	defer func() {
		for _, b := range bufs {
			s.putArgBuf(b)
		}
	}()
	for i := 0; i < len(reqs); i += per {
		b := s.pollCall(reqs[i:min(i+per, len(reqs))], fixed[:])
		calls, bufs = append(calls, *b), append(bufs, b)
	}
	replies, errs := s.runPolls(ctx, calls)
	for ci := range calls {
		first := ci * per
		part := out[first:min(first+per, len(out))]
		if errs[ci] != nil {
			for i := range part {
				part[i].Err = errs[ci]
			}
			continue
		}
		if err := parsePoll(replies[ci], reqs[first:first+len(part)], part, pageSize); err != nil {
			for i := range part {
				part[i] = PollReply{Err: err}
			}
		}
	}
	return out, nil
}

// pollHeads returns, per partition, its keys in a call of poll.lua, boxed.
func pollHeads(parts []Keys) [][]any {
	heads := make([][]any, len(parts))
	for p, k := range parts {
		heads[p] = []any{k.Lease, k.Loaded, k.Inbox, k.Pending, k.Running}
	}
	return heads
}

// pollCall returns a call of poll.lua for reqs, in a slice from argBufs
// (putArgBuf gives it back). A token or a Scanned that is the previous
// request's is boxed once.
func (s *Store) pollCall(reqs []PollRequest, fixed []any) *[]any {
	nkeys := 0
	for _, r := range reqs {
		nkeys += len(s.pollHead[r.P])
	}
	buf := s.argBuf(3 + nkeys + len(fixed) + 3*len(reqs))
	a := (*buf)[:0]
	a = append(a, "evalsha", s.poll.Hash(), nkeys)
	for _, r := range reqs {
		a = append(a, s.pollHead[r.P]...)
	}
	a = append(a, fixed...)
	var tok, scanned any
	for i, r := range reqs {
		if i == 0 || r.Token != reqs[i-1].Token {
			tok = r.Token
		}
		if i == 0 || r.Scanned != reqs[i-1].Scanned {
			scanned = r.Scanned
		}
		mode := ""
		if r.Reset {
			mode = "reset"
		}
		a = append(a, tok, mode, scanned)
	}
	*buf = a
	return buf
}

// runPolls sends the calls of poll.lua, one command alone or several in
// a pipeline, and returns each one's reply or error. A call that finds
// the script missing from its server's cache (NOSCRIPT) is sent again as
// EVAL, as Script.Run does: each server loads it for itself, so a server
// that cannot be reached fails only its own calls.
func (s *Store) runPolls(ctx context.Context, calls [][]any) ([]any, []error) {
	replies, errs := make([]any, len(calls)), make([]error, len(calls))
	send := func(idx []int) {
		if len(idx) == 1 {
			replies[idx[0]], errs[idx[0]] = s.rdb.Do(ctx, calls[idx[0]]...).Result()
			return
		}
		cmds := make([]*redis.Cmd, len(idx))
		pipe := s.rdb.Pipeline()
		for j, ci := range idx {
			cmds[j] = pipe.Do(ctx, calls[ci]...)
		}
		_, _ = pipe.Exec(ctx) // each command's error is its own
		for j, ci := range idx {
			replies[ci], errs[ci] = cmds[j].Result()
		}
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	send(all)
	var again []int
	for ci, err := range errs {
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			calls[ci][0], calls[ci][1] = "eval", pollLua
			again = append(again, ci)
		}
	}
	if len(again) > 0 {
		send(again)
	}
	for ci, err := range errs {
		if err != nil {
			errs[ci] = wrap(err)
		}
	}
	return replies, errs
}

// parsePoll reads a reply of poll.lua to reqs into their replies (see
// the script for its layout).
func parsePoll(reply any, reqs []PollRequest, out []PollReply, pageSize int) error {
	v, ok := reply.([]any)
	if !ok || len(v) == 0 {
		return fmt.Errorf("%w: poll reply %T", ErrCorrupt, reply)
	}
	head, ok := v[0].(string)
	if !ok {
		return fmt.Errorf("%w: poll reply head %T", ErrCorrupt, v[0])
	}
	items := v[1:]
	entries := func(n int) ([]Entry, error) {
		if n < 0 || 2*n > len(items) {
			return nil, fmt.Errorf("%w: poll reply of %d items, %d entries due", ErrCorrupt, len(items), n)
		}
		if n == 0 {
			return nil, nil
		}
		es := make([]Entry, n)
		for j := range es {
			key, ok := items[2*j].(string)
			if !ok {
				return nil, fmt.Errorf("%w: poll reply key %T", ErrCorrupt, items[2*j])
			}
			due, err := scoreOf(items[2*j+1])
			if err != nil {
				return nil, err
			}
			es[j] = Entry{Key: key, Due: due}
		}
		items = items[2*n:]
		return es, nil
	}
	for i := range out {
		var field string
		var found bool
		field, head, found = strings.Cut(head, "|")
		if !found && i < len(out)-1 {
			return fmt.Errorf("%w: poll reply for %d partitions, %d asked", ErrCorrupt, i+1, len(out))
		}
		r := &out[i]
		switch field {
		case "F":
			r.Err = fmt.Errorf("%w (partition lease is held by another owner)", ErrFenced)
			continue
		case "E":
			if len(items) == 0 {
				return fmt.Errorf("%w: poll reply without its error", ErrCorrupt)
			}
			r.Err = errs.Errorf("wheelq: poll: %v", items[0])
			items = items[1:]
			continue
		}
		prev, rest, ok1 := strings.Cut(field, ",")
		nin, npage, ok2 := strings.Cut(rest, ",")
		nin, r.InboxMore = strings.CutSuffix(nin, "+")
		in, err1 := strconv.Atoi(nin)
		pg, err2 := strconv.Atoi(npage)
		if !ok1 || !ok2 || err1 != nil || err2 != nil {
			return fmt.Errorf("%w: poll reply field %q", ErrCorrupt, field)
		}
		switch prev {
		case "":
		case "=":
			r.Prev, r.HavePrev = reqs[i].Scanned, true
		default:
			var err error
			if r.Prev, err = strconv.ParseInt(prev, 10, 64); err != nil {
				r.Err = fmt.Errorf("%w: loaded-until %q", ErrCorrupt, prev)
			}
			r.HavePrev = true
		}
		var err error
		if r.Inbox, err = entries(in); err != nil {
			return err
		}
		if pg >= 0 {
			if r.Page, err = entries(pg); err != nil {
				return err
			}
			r.Read = true
			r.Cursor.Done = pg < pageSize
			if pg > 0 {
				last := r.Page[pg-1]
				r.Cursor.Score, r.Cursor.Member = last.Due, last.Key
			}
		}
	}
	if head != "" || len(items) > 0 {
		return fmt.Errorf("%w: poll reply longer than asked", ErrCorrupt)
	}
	return nil
}
