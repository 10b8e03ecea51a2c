package persist

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq/internal/errs"
)

// ReadLayout returns the number of partitions namespace ns was created
// with, and ErrNotFound when it was never created (Init records it). It
// writes nothing.
func ReadLayout(ctx context.Context, rdb redis.UniversalClient, ns string) (int, error) {
	v, err := rdb.HGet(ctx, metaKey(ns), "partitions").Result()
	if errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("%w: namespace %q", ErrNotFound, ns)
	}
	if err != nil {
		return 0, errs.Errorf("wheelq: read layout: %w", err)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: namespace %q records %q partitions", ErrCorrupt, ns, v)
	}
	return n, nil
}
