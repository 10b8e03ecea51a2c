package errs_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/errs"
)

type codeErr struct{ code int }

func (c *codeErr) Error() string { return fmt.Sprint("wheelq: code ", c.code) }

func TestErrorf(t *testing.T) {
	notFound := errors.New("wheelq: job not found")
	err := errs.Errorf("wheelq: cancel %s: %w", "t/x", notFound)
	require.EqualError(t, err, "wheelq: cancel t/x: job not found")
	require.ErrorIs(t, err, notFound)

	// Nested: each level's prefix goes.
	outer := errs.Errorf("wheelq: schedule: %w", errs.Errorf("wheelq: layout: %w", notFound))
	require.EqualError(t, outer, "wheelq: schedule: layout: job not found")
	require.ErrorIs(t, outer, notFound)

	// Several %w, errors.As.
	ce := &codeErr{7}
	two := errs.Errorf("wheelq: both: %w and %w", ce, io.EOF)
	require.EqualError(t, two, "wheelq: both: code 7 and EOF")
	require.ErrorIs(t, two, io.EOF)
	var got *codeErr
	require.ErrorAs(t, two, &got)
	require.Equal(t, 7, got.code)

	// A format that does not start with the prefix is fmt.Errorf's.
	sentinel := errors.New("wheelq: invalid config")
	plain := errs.Errorf("%w: cache bytes %d < 1", sentinel, -1)
	require.EqualError(t, plain, "wheelq: invalid config: cache bytes -1 < 1")
	require.ErrorIs(t, plain, sentinel)

	// Other errors keep their text; nil is formatted as fmt would.
	require.EqualError(t, errs.Errorf("wheelq: read: %w", io.EOF), "wheelq: read: EOF")
	require.EqualError(t, errs.Errorf("wheelq: x %v", nil), "wheelq: x <nil>")
}
