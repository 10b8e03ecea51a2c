package wheelqotel_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/wheelq/wheelq"
	wheelqotel "github.com/wheelq/wheelq/contrib/otel"
	"github.com/wheelq/wheelq/internal/leakcheck"
	"github.com/wheelq/wheelq/internal/redistest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := leakcheck.Check("github.com/wheelq/wheelq"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

type bundle struct {
	q   *wheelq.Queue
	tr  *wheelqotel.Tracer
	rec *tracetest.SpanRecorder
	tp  trace.TracerProvider
	ctx context.Context
}

// setup starts a redis-server, a queue on it (not yet started) and a
// Tracer recording its spans in memory.
func setup(t *testing.T, child bool) *bundle {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	q, err := wheelq.New(srv.Client(t), wheelq.Config{Partitions: 2,
		Backoff: func(int, error) time.Duration { return time.Millisecond }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &bundle{q: q, tr: wheelqotel.New(wheelqotel.Config{TracerProvider: tp, Child: child}), rec: rec, tp: tp, ctx: context.Background()}
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// ended returns the ended spans of name, waiting until there are n.
func (b *bundle) ended(t *testing.T, name string, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	var out []sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		out = out[:0]
		for _, s := range b.rec.Ended() {
			if s.Name() == name {
				out = append(out, s)
			}
		}
		return len(out) >= n
	}, 20*time.Second, 5*time.Millisecond, "%d spans %q", n, name)
	require.Len(t, out, n)
	return out
}

// TestProducerConsumerLinked: Schedule makes a producer span in the
// caller's trace; each run (a failed one, then its retry) a consumer span
// in a trace of its own, linked to the producer span, in the context the
// handler gets; both with the messaging attributes.
func TestProducerConsumerLinked(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	seen := make(chan trace.SpanContext, 4)
	require.NoError(t, b.q.Handle("mail", b.tr.Handler(wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		seen <- trace.SpanContextFromContext(ctx)
		if j.Attempt == 1 {
			return errors.New("smtp down")
		}
		return nil
	}))))
	require.NoError(t, b.q.Start(b.ctx))

	// The caller's own span: the producer span is its child.
	ctx, parent := b.tp.Tracer("app").Start(b.ctx, "request")
	id, err := b.tr.Schedule(ctx, b.q, "mail", []byte("hello"), wheelq.ID("m-1"),
		wheelq.Headers(map[string]string{"tenant": "a"}))
	require.NoError(t, err)
	parent.End()
	require.Equal(t, "m-1", id)

	prod := b.ended(t, "publish mail", 1)[0]
	require.Equal(t, trace.SpanKindProducer, prod.SpanKind())
	require.Equal(t, parent.SpanContext().SpanID(), prod.Parent().SpanID())
	require.Equal(t, map[attribute.Key]attribute.Value{
		"messaging.system":            attribute.StringValue("wheelq"),
		"messaging.destination.name":  attribute.StringValue("mail"),
		"messaging.operation.type":    attribute.StringValue("publish"),
		"messaging.operation.name":    attribute.StringValue("publish"),
		"messaging.message.body.size": attribute.IntValue(5),
		"messaging.message.id":        attribute.StringValue("m-1"),
	}, attrs(prod))
	require.Equal(t, "https://opentelemetry.io/schemas/1.26.0", prod.InstrumentationScope().SchemaURL)

	runs := b.ended(t, "process mail", 2)
	for i, s := range runs {
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
		require.Len(t, s.Links(), 1)
		require.Equal(t, prod.SpanContext().TraceID(), s.Links()[0].SpanContext.TraceID())
		require.Equal(t, prod.SpanContext().SpanID(), s.Links()[0].SpanContext.SpanID(), "linked to the producer span")
		require.False(t, s.Parent().IsValid(), "the root of a trace of its own")
		require.NotEqual(t, prod.SpanContext().TraceID(), s.SpanContext().TraceID())
		a := attrs(s)
		require.Equal(t, "wheelq", a["messaging.system"].AsString())
		require.Equal(t, "mail", a["messaging.destination.name"].AsString())
		require.Equal(t, "process", a["messaging.operation.type"].AsString())
		require.Equal(t, "m-1", a["messaging.message.id"].AsString())
		require.Equal(t, int64(i+1), a[wheelqotel.AttemptKey].AsInt64())
		require.Equal(t, s.SpanContext(), <-seen, "the handler runs in the consumer span")
	}
	require.Equal(t, codes.Error, runs[0].Status().Code)
	require.Equal(t, "smtp down", runs[0].Status().Description)
	require.Len(t, runs[0].Events(), 1, "the error recorded")
	require.Equal(t, codes.Unset, runs[1].Status().Code)
}

// TestConsumerChild: with Config.Child a run's span is a child of the
// producer span, in its trace, and still linked to it; the caller's
// headers travel beside the trace context.
func TestConsumerChild(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	headers := make(chan map[string]string, 1)
	require.NoError(t, b.q.Handle("t", b.tr.Handler(wheelq.HandlerFunc(func(_ context.Context, j *wheelq.Job) error {
		headers <- j.Headers
		return nil
	}))))
	require.NoError(t, b.q.Start(b.ctx))
	_, err := b.tr.Schedule(b.ctx, b.q, "t", nil, wheelq.Headers(map[string]string{"tenant": "a", "traceparent": "caller's, replaced"}))
	require.NoError(t, err)
	prod := b.ended(t, "publish t", 1)[0]
	run := b.ended(t, "process t", 1)[0]
	require.Equal(t, prod.SpanContext().TraceID(), run.SpanContext().TraceID())
	require.Equal(t, prod.SpanContext().SpanID(), run.Parent().SpanID())
	require.Len(t, run.Links(), 1)
	h := <-headers
	require.Equal(t, "a", h["tenant"])
	require.Contains(t, h["traceparent"], prod.SpanContext().TraceID().String())
}

// TestScheduleError: a failed Schedule ends its span with an Error status
// and no message id; a job without trace context gets an unlinked span.
func TestScheduleError(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	_, err := b.tr.Schedule(b.ctx, b.q, "t", nil, wheelq.MaxAttempts(0))
	require.ErrorIs(t, err, wheelq.ErrInvalidOption)
	prod := b.ended(t, "publish t", 1)[0]
	require.Equal(t, codes.Error, prod.Status().Code)
	require.NotContains(t, attrs(prod), attribute.Key("messaging.message.id"))

	ran := make(chan struct{})
	require.NoError(t, b.q.Handle("plain", b.tr.Handler(wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error {
		close(ran)
		panic("boom")
	}))))
	require.NoError(t, b.q.Start(b.ctx))
	_, err = b.q.Schedule(b.ctx, "plain", nil, wheelq.MaxAttempts(1))
	require.NoError(t, err)
	<-ran
	run := b.ended(t, "process plain", 1)[0]
	require.Empty(t, run.Links())
	require.Equal(t, codes.Error, run.Status().Code)
	require.Equal(t, "panic: boom", run.Status().Description)
}
