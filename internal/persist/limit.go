package persist

// Per-topic limits across processes (limit.lua): the permits of a global
// concurrency cap and the start times of a global rate.

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/limit.lua
var limitLua string

// Denied is Admit's start time for a request refused by a full cap.
const Denied = -1

// LimitRequest asks for a start of one job of a limited topic.
type LimitRequest struct {
	Topic    string
	Cap      int   // the topic's global concurrency cap (0: none)
	Interval int64 // µs between starts of the topic's rate (0: none)
	ID       string
	Due      int64 // unix µs
}

// PermitRef names a permit of a topic's cap.
type PermitRef struct {
	Topic, ID string
}

func (s *Store) limitKeys(topic string) (held, rate string) {
	tag := "wq:{" + s.ns + "}:limit:" + topic
	return tag + ":held", tag + ":rate"
}

// Admit asks for the starts of reqs, in one call: the start time of each
// (unix µs), or Denied. A permit granted lapses at its start plus lease
// unless renewed (RenewPermits).
func (s *Store) Admit(ctx context.Context, now, lease int64, reqs []LimitRequest) ([]int64, error) {
	var order []string
	byTopic := map[string][]int{}
	for i, r := range reqs {
		if _, ok := byTopic[r.Topic]; !ok {
			order = append(order, r.Topic)
		}
		byTopic[r.Topic] = append(byTopic[r.Topic], i)
	}
	keys := make([]string, 0, 2*len(order))
	args := []any{now, lease}
	idx := make([]int, 0, len(reqs)) // the request of each reply, in reply order
	for _, t := range order {
		held, rate := s.limitKeys(t)
		keys = append(keys, held, rate)
		is := byTopic[t]
		args = append(args, reqs[is[0]].Cap, reqs[is[0]].Interval, len(is))
		for _, i := range is {
			args = append(args, reqs[i].ID, reqs[i].Due)
			idx = append(idx, i)
		}
	}
	v, err := s.limit.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return nil, wrap(err)
	}
	if len(v) != len(reqs) {
		return nil, fmt.Errorf("%w: limit.lua: %d replies for %d requests", ErrCorrupt, len(v), len(reqs))
	}
	out := make([]int64, len(reqs))
	for k, i := range idx {
		out[i] = v[k]
	}
	return out, nil
}

// RenewPermits moves the expiry of the permits ps (those still held) to
// a lease (µs) after now by Redis's clock, unless it is later already,
// in one call.
func (s *Store) RenewPermits(ctx context.Context, lease int64, ps []PermitRef) error {
	if len(ps) == 0 {
		return nil
	}
	keys := make([]string, len(ps))
	args := make([]any, 0, len(ps)+1)
	args = append(args, lease)
	for i, p := range ps {
		keys[i], _ = s.limitKeys(p.Topic)
		args = append(args, p.ID)
	}
	if err := renewPermits.Run(ctx, s.rdb, keys, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return wrap(err)
	}
	return nil
}

// renewPermits moves the permits' expiry to Redis's now plus a lease
// (ARGV[1], µs): KEYS[i] is permit ARGV[i+1]'s ZSET. XX: a permit given
// back stays gone; GT: one given for a start later than now (a rate's)
// keeps its expiry past that start.
var renewPermits = redis.NewScript(`
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', 'GT', expiry, ARGV[i + 1])
end
return 0
`)

// ReleasePermits gives the permits ps back, in one round trip.
func (s *Store) ReleasePermits(ctx context.Context, ps []PermitRef) error {
	pipe := s.rdb.Pipeline()
	for _, p := range ps {
		held, _ := s.limitKeys(p.Topic)
		pipe.ZRem(ctx, held, p.ID)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return wrap(err)
	}
	return nil
}

// Permits counts the permits of topic's cap held now (for tests and the
// figures).
func (s *Store) Permits(ctx context.Context, topic string, now int64) (int64, error) {
	held, _ := s.limitKeys(topic)
	n, err := s.rdb.ZCount(ctx, held, fmt.Sprint(now), "+inf").Result()
	if err != nil {
		return 0, wrap(err)
	}
	return n, nil
}
