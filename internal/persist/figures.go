package persist

import (
	"context"
	"slices"
)

// figuresKey is the namespace's HASH of the live workers' figures: member
// id -> the figures it last published (an opaque blob, the root package's
// JSON). It shares the roster's hash tag.
func figuresKey(ns string) string { return "wq:{" + ns + "}:figures" }

// PublishFigures stores member's figures.
func (s *Store) PublishFigures(ctx context.Context, member string, blob []byte) error {
	if err := s.rdb.HSet(ctx, figuresKey(s.ns), member, blob).Err(); err != nil {
		return wrap(err)
	}
	return nil
}

// DropFigures removes member's figures (it left the roster).
func (s *Store) DropFigures(ctx context.Context, member string) error {
	if err := s.rdb.HDel(ctx, figuresKey(s.ns), member).Err(); err != nil {
		return wrap(err)
	}
	return nil
}

// Figures returns the figures of the members in the roster, by member id;
// those of members no longer in it (a process killed) are removed.
func (s *Store) Figures(ctx context.Context) (map[string][]byte, error) {
	pipe := s.rdb.Pipeline()
	all := pipe.HGetAll(ctx, figuresKey(s.ns))
	members := pipe.ZRange(ctx, membersKeys(s.ns)[0], 0, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, wrap(err)
	}
	live := members.Val()
	out := map[string][]byte{}
	var stale []string
	for m, blob := range all.Val() {
		if slices.Contains(live, m) {
			out[m] = []byte(blob)
		} else {
			stale = append(stale, m)
		}
	}
	if len(stale) > 0 {
		_ = s.rdb.HDel(ctx, figuresKey(s.ns), stale...).Err() // tidying: the next read tries again
	}
	return out, nil
}
