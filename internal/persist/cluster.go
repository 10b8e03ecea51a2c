package persist

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq/internal/errs"
)

// maxReroutes bounds how many times runOnPrimaries sends calls again after
// a redirect (a failover or a slot migration under way) or a NOSCRIPT; the
// caller's context bounds it too.
const maxReroutes = 10

// runOnPrimaries is runWrites on a cluster. WAIT counts the writes of the
// connection it is sent on, and a cluster pipeline sends a keyless WAIT to
// whichever primary go-redis picks; so the calls are grouped by the primary
// that serves their slot (MasterForKey), and each group runs, followed by
// its WAIT, in one pipeline of that primary's own client (one connection),
// the groups concurrently. A call that got a redirect (MOVED, ASK), a
// TRYAGAIN, CLUSTERDOWN or LOADING was not run by that node: the cluster's
// slot map is reloaded and it is sent again, to the node that serves it
// now, with a WAIT there. A call that got NOSCRIPT was not run either: the
// scripts are loaded on that node and only that call is sent again. Any
// other failure ends the round: a reply that was lost (a timeout, a broken
// connection) is returned as it is, so that the caller reports an unknown
// outcome. A primary that took a write but whose replicas did not all
// acknowledge it fails the batch with ErrNotReplicated.
func (s *Store) runOnPrimaries(ctx context.Context, calls [][]any, extra ...func(redis.Pipeliner)) ([]any, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return nil, errs.Errorf("wheelq: runOnPrimaries on a %T", s.rdb)
	}
	if len(extra) > 0 {
		probe := cc.Pipeline()
		for _, f := range extra {
			f(probe)
		}
		if probe.Len() > 0 { // no caller does this today: Write's plain writes are not used in a cluster
			return nil, errors.New("wheelq: commands outside script calls cannot wait for replicas on a cluster")
		}
	}
	out := make([]any, len(calls))
	todo := make([]int, 0, len(calls))
	for i, a := range calls {
		if a != nil {
			todo = append(todo, i)
		}
	}
	var redirect, again error // the last redirect seen; the last reason to send calls again
	for round := 0; len(todo) > 0; round++ {
		if round > maxReroutes {
			return nil, wrap(again)
		}
		if redirect != nil {
			cc.ReloadState(ctx)
			if err := sleepCtx(ctx, time.Duration(round)*20*time.Millisecond); err != nil {
				return nil, errs.Errorf("wheelq: %w (after %v)", err, redirect)
			}
		}
		redirect = nil
		var nodes []*redis.Client
		groups := map[*redis.Client][]int{}
		for _, i := range todo {
			key, _ := calls[i][3].(string) // every call starts evalsha, hash, number of keys, first key
			node, err := cc.MasterForKey(ctx, key)
			if err != nil {
				return nil, wrap(err) // nothing of this round was sent
			}
			if _, seen := groups[node]; !seen {
				nodes = append(nodes, node)
			}
			groups[node] = append(groups[node], i)
		}
		res := make([]nodeRound, len(nodes))
		var wg sync.WaitGroup
		for n, node := range nodes {
			wg.Go(func() { res[n] = s.runOnNode(ctx, node, calls, groups[node], out) })
		}
		wg.Wait()
		todo = todo[:0]
		var lost, refused, unacked error
		for _, r := range res {
			todo = append(todo, r.again...)
			redirect = cmp.Or(redirect, r.redirect)
			again = cmp.Or(r.redirect, r.noscript, again)
			lost, refused, unacked = cmp.Or(lost, r.lost), cmp.Or(refused, r.refused), cmp.Or(unacked, r.unacked)
		}
		// A lost reply first (the outcome is unknown), then writes made but
		// not replicated (also unknown to the caller), then a refusal.
		switch {
		case lost != nil:
			return nil, wrap(lost)
		case unacked != nil:
			return nil, unacked
		case refused != nil:
			return nil, wrap(refused)
		}
	}
	return out, nil
}

// nodeRound is what one primary did with its group of a round.
type nodeRound struct {
	again    []int // calls to send again: redirected, or NOSCRIPT
	redirect error // a redirect among them
	noscript error // a NOSCRIPT among them
	lost     error // a failure that is not Redis's answer: the outcome is unknown
	refused  error // Redis's answer to a call: an error
	unacked  error // a write applied here that not enough replicas acknowledged
}

// runOnNode sends the calls idx of calls to node in one pipeline, followed
// by WAIT, and puts the replies of those that ran in out.
func (s *Store) runOnNode(ctx context.Context, node *redis.Client, calls [][]any, idx []int, out []any) nodeRound {
	var r nodeRound
	pipe := node.Pipeline()
	cmds := make([]*redis.Cmd, len(idx))
	for k, i := range idx {
		cmds[k] = pipe.Do(ctx, calls[i]...)
	}
	acked := waitCmd(ctx, pipe, s.acks, s.ackTimeout)
	_, _ = pipe.Exec(ctx) // each command's error is read below
	applied, noscript := false, false
	for k, c := range cmds {
		v, err := c.Result()
		switch {
		case err == nil || errors.Is(err, redis.Nil):
			out[idx[k]], applied = v, true
		case redis.HasErrorPrefix(err, "NOSCRIPT"):
			noscript = true
			r.noscript = err
			r.again = append(r.again, idx[k])
		case notRun(err):
			r.redirect = cmp.Or(r.redirect, err)
			r.again = append(r.again, idx[k])
		case isRedisError(err):
			r.refused = cmp.Or(r.refused, err)
		default:
			r.lost = cmp.Or(r.lost, err)
		}
	}
	if noscript {
		if err := s.loadScriptsOn(ctx, node); err != nil {
			r.lost = cmp.Or(r.lost, err)
		}
	}
	if applied {
		if n, err := acked.Result(); err != nil || n < int64(s.acks) {
			r.unacked = fmt.Errorf("%w: %d of %d within %v on %s (%v)", ErrNotReplicated, n, s.acks, s.ackTimeout, node.Options().Addr, err)
		}
	}
	return r
}

// notRun reports whether err is a cluster node's answer that it did not
// run the command (the slot is served elsewhere, or not served now), so
// that sending it again, where the slot map says, is safe.
func notRun(err error) bool {
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	if _, ok := redis.IsAskError(err); ok {
		return true
	}
	return redis.IsTryAgainError(err) || redis.IsClusterDownError(err) || redis.HasErrorPrefix(err, "LOADING")
}

// isRedisError reports whether err is an error reply of Redis (not a
// failure to reach it or to read its reply).
func isRedisError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
