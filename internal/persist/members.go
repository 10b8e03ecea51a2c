package persist

import (
	"context"
	_ "embed" // the membership script
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/members.lua
var membersLua string

// membersScript is immutable once made: a script's source and hash.
var membersScript = redis.NewScript(membersLua)

// MemberOp is an operation on the namespace's roster of live workers.
type MemberOp string

// Roster operations.
const (
	MemberBeat  MemberOp = "beat"  // join, or renew one's entry; returns the roster
	MemberLeave MemberOp = "leave" // leave at once (a graceful stop)
	MemberPeek  MemberOp = "peek"  // only the roster's version
)

// Roster is the namespace's list of live workers as Redis sees it.
type Roster struct {
	// Version changes whenever a member joins, leaves or expires.
	Version int64
	// Members are the live members' ids, sorted (MemberBeat only).
	Members []string
	// Left says the member was in the roster and left (MemberLeave only).
	Left bool
}

// membersKeys are the roster's keys; they share the namespace's hash tag.
func membersKeys(ns string) []string {
	return []string{"wq:{" + ns + "}:members", "wq:{" + ns + "}:members-version"}
}

// Members runs op on the roster for member id: a beat keeps id's entry
// for ttl (by Redis's clock) and returns the live members; leave removes
// it; peek returns only the version. Every call drops expired entries.
func (s *Store) Members(ctx context.Context, op MemberOp, id string, ttl time.Duration) (Roster, error) {
	res, err := membersScript.Run(ctx, s.rdb, membersKeys(s.ns), string(op), id, ttl.Milliseconds()).Slice()
	if err != nil {
		return Roster{}, wrap(err)
	}
	if len(res) == 0 {
		return Roster{}, fmt.Errorf("%w: empty roster reply", ErrCorrupt)
	}
	v, ok := res[0].(int64)
	if !ok {
		return Roster{}, fmt.Errorf("%w: roster version %v", ErrCorrupt, res[0])
	}
	r := Roster{Version: v}
	if op == MemberLeave {
		n, _ := res[len(res)-1].(int64)
		r.Left = len(res) == 2 && n == 1
		return r, nil
	}
	for _, m := range res[1:] {
		id, ok := m.(string)
		if !ok {
			return Roster{}, fmt.Errorf("%w: roster member %v", ErrCorrupt, m)
		}
		r.Members = append(r.Members, id)
	}
	slices.Sort(r.Members)
	return r, nil
}

// WatchRoster calls changed whenever the roster changes (a member joined,
// left or expired, as seen by a call of Members), until ctx ends. It
// holds a subscription (one connection) meanwhile. Changes published
// while the subscription was broken are missed: a caller still peeks at
// the version now and then.
func (s *Store) WatchRoster(ctx context.Context, changed func()) error {
	return s.subscribe(ctx, membersKeys(s.ns)[0], func(string) { changed() })
}
