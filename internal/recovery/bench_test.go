package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/wheel"
)

// nopSink is a Sink that keeps nothing.
type nopSink struct{}

func (nopSink) Arm([]persist.Entry) {}
func (nopSink) Release(int)         {}
func (nopSink) Renewed()            {}
func (nopSink) Busy(int) bool       { return false }

// BenchmarkIdlePoll measures the poller of an idle queue owning all 16
// partitions on a real redis-server: "pass" is one pass (announcements,
// inboxes, window scans), "loop" is what the poller does every
// PollInterval (the roster check, then a pass). B/op is the garbage per
// pass.
func BenchmarkIdlePoll(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	ctx := context.Background()
	st, err := persist.New(srv.Client(b), persist.Options{Namespace: "bench"})
	require.NoError(b, err)
	require.NoError(b, st.Init(ctx))
	r, err := New(st, nopSink{}, Config{Token: "me"})
	require.NoError(b, err)
	r.leases(ctx)
	require.Equal(b, st.Partitions(), r.Owned())
	r.pass(ctx, time.Now()) // the reload
	b.Run("pass", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.pass(ctx, time.Now())
		}
	})
	b.Run("loop", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.watch(ctx)
			now, wall := wheel.Readings(r.cfg.Clock)
			r.noteWallStep(now, wall)
			r.pass(ctx, wall)
		}
	})
	require.Equal(b, st.Partitions(), r.Owned())
	require.Nil(b, r.lastErr.Load(), "no call failed")
}
