package wheelqotel_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/wheelq/wheelq"
	wheelqotel "github.com/wheelq/wheelq/contrib/otel"
	"github.com/wheelq/wheelq/internal/redistest"
)

// Schedule through the Tracer and wrap the handler: the run's span is
// linked to the span of the Schedule call.
func Example() {
	// A throwaway Redis (miniredis where redis-server is missing); your
	// own client in your code.
	srv, err := redistest.StartServer(redistest.Options{})
	if err != nil {
		if srv, err = redistest.StartMiniredis(); err != nil {
			panic(err)
		}
	}
	defer srv.Close()
	rdb := srv.NewClient()
	defer rdb.Close()
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder() // your exporter in your code
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(ctx)

	q, err := wheelq.New(rdb, wheelq.Config{})
	if err != nil {
		panic(err)
	}
	tr := wheelqotel.New(wheelqotel.Config{TracerProvider: tp})
	links := make(chan []sdktrace.Link, 1)
	_ = q.Handle("mail", tr.Handler(wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		links <- trace.SpanFromContext(ctx).(sdktrace.ReadOnlySpan).Links()
		return nil
	})))
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	defer q.Shutdown(ctx)
	if _, err := tr.Schedule(ctx, q, "mail", []byte("hi")); err != nil {
		panic(err)
	}
	l := <-links
	var publish sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() { // ended when Schedule returned
		if s.SpanKind() == trace.SpanKindProducer {
			publish = s
		}
	}
	fmt.Println(publish.Name(), "->", len(l), "link to it:", l[0].SpanContext.SpanID() == publish.SpanContext().SpanID())
	// Output: publish mail -> 1 link to it: true
}
