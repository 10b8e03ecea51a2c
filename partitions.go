package wheelq

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq/internal/persist"
)

// Partitions returns the number of partitions the namespace was created
// with in Redis (by the first queue that used it), so that a tool that
// inspects a namespace can make its Config to match. It writes nothing. A
// namespace never used gives an error wrapping ErrNotFound, a name no
// namespace may have (see Config.Namespace) one wrapping ErrInvalidConfig.
func Partitions(ctx context.Context, rdb redis.UniversalClient, namespace string) (int, error) {
	if rdb == nil {
		return 0, fmt.Errorf("%w: nil redis client", ErrInvalidConfig)
	}
	if namespace == "" {
		namespace = defaultNamespace
	}
	if err := validNamespace(namespace); err != nil {
		return 0, err
	}
	n, err := persist.ReadLayout(ctx, rdb, namespace)
	if errors.Is(err, persist.ErrNotFound) {
		return 0, fmt.Errorf("%w: no namespace %q in this Redis", ErrNotFound, namespace)
	}
	return n, err
}

// defaultNamespace is Config.Namespace's default.
const defaultNamespace = "default"
