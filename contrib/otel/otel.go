// Package wheelqotel traces wheelq jobs with OpenTelemetry, from the
// Schedule call that makes a job to each run of it. It is a module of its
// own (github.com/wheelq/wheelq/contrib/otel), so that OpenTelemetry stays
// out of the queue's dependencies.
//
//	tr := wheelqotel.New(wheelqotel.Config{})
//	q.Handle("mail", tr.Handler(mailHandler))
//	id, err := tr.Schedule(ctx, q, "mail", payload, wheelq.After(time.Hour))
//
// Tracer.Schedule starts a producer span ("publish <topic>", kind
// Producer) as a child of ctx's span, injects its context into the job's
// headers (wheelq.Headers; W3C traceparent and tracestate by default) and
// ends the span when Schedule returns. Tracer.Handler wraps a handler: each
// run gets a consumer span ("process <topic>", kind Consumer) in the
// handler's context, linked to the producer span.
//
// # Linked, not a child
//
// A run's span is linked to the producer span, and is the root of a trace
// of its own, as the messaging conventions recommend for the processing
// of a message: a job runs long after it was scheduled (an hour, a
// week), maybe several times (retries, each a span, each linked to the
// one producer span), and a trace that stayed open that long would be cut
// by any tracing backend's trace window and would hang every run's spans
// under an old request. Config.Child makes each run's span a child of the
// producer span instead (still with the link), for short delays where one
// trace from request to job is worth more.
//
// # Attributes
//
// The spans follow the OpenTelemetry semantic conventions for messaging,
// version 1.26.0 (go.opentelemetry.io/otel/semconv/v1.26.0):
//
//	messaging.system             "wheelq"
//	messaging.destination.name   the topic
//	messaging.operation.type     "publish" (Schedule) or "process" (a run)
//	messaging.operation.name     "publish" or "process"
//	messaging.message.id         the job's id (on the producer span once Schedule returned it)
//	messaging.message.body.size  the payload's length in bytes
//	wheelq.job.attempt           the run's attempt, from 1 (consumer spans)
//
// A failed Schedule or run sets the span's status to Error and records
// the error (a panic too, which then goes on to the queue).
package wheelqotel

import (
	"context"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/wheelq/wheelq"
)

// ScopeName is the instrumentation scope of the spans (the tracer's name).
const ScopeName = "github.com/wheelq/wheelq/contrib/otel"

// System is the value of messaging.system.
const System = "wheelq"

// AttemptKey is the attribute of a run's attempt, from 1.
const AttemptKey = attribute.Key("wheelq.job.attempt")

// Config configures a Tracer. A zero field means its default.
type Config struct {
	// TracerProvider makes the tracer. Default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator writes the producer span's context into a job's headers
	// and reads it back. Default propagation.TraceContext{} (W3C
	// traceparent and tracestate; the global propagator is no-op until
	// set, which would carry nothing).
	Propagator propagation.TextMapPropagator
	// Child makes each run's span a child of the producer span (in its
	// trace) rather than the root of a trace of its own; it is linked to
	// it either way. See the package doc.
	Child bool
}

// Tracer starts the spans of scheduling and running jobs. It is safe for
// concurrent use.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	child  bool
}

// New returns a Tracer.
func New(cfg Config) *Tracer {
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	return &Tracer{
		tracer: cfg.TracerProvider.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		prop:   cfg.Propagator,
		child:  cfg.Child,
	}
}

// Scheduler is what Tracer.Schedule schedules through: a *wheelq.Queue.
type Scheduler interface {
	Schedule(ctx context.Context, topic string, payload []byte, opts ...wheelq.Option) (string, error)
}

// Schedule calls q.Schedule(ctx, topic, payload, opts...) in a producer
// span, child of ctx's span, and carries the span's context in the job's
// headers (merged with any Headers in opts; the trace context's keys
// win). It returns what q.Schedule returns.
func (t *Tracer) Schedule(ctx context.Context, q Scheduler, topic string, payload []byte, opts ...wheelq.Option) (string, error) {
	ctx, span := t.tracer.Start(ctx, "publish "+topic,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String(System),
			semconv.MessagingDestinationName(topic),
			semconv.MessagingOperationTypePublish,
			semconv.MessagingOperationName("publish"),
			semconv.MessagingMessageBodySize(len(payload)),
		))
	defer span.End()
	carrier := propagation.MapCarrier{}
	t.prop.Inject(ctx, carrier)
	if len(carrier) > 0 {
		opts = append(slices.Clip(opts), wheelq.Headers(carrier))
	}
	id, err := q.Schedule(ctx, topic, payload, opts...)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return id, err
	}
	span.SetAttributes(semconv.MessagingMessageID(id))
	return id, nil
}

// Handler wraps h: each run gets a consumer span, linked to the span of
// the Schedule that made the job (a child of it with Config.Child), in
// the context h is given. A job scheduled without trace context gets a
// span without a link.
func (t *Tracer) Handler(h wheelq.Handler) wheelq.Handler {
	return wheelq.HandlerFunc(func(ctx context.Context, job *wheelq.Job) (err error) {
		producer := trace.SpanContextFromContext(t.prop.Extract(context.Background(), propagation.MapCarrier(job.Headers)))
		opts := []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(
				semconv.MessagingSystemKey.String(System),
				semconv.MessagingDestinationName(job.Topic),
				semconv.MessagingOperationTypeDeliver, // "process" in v1.26.0
				semconv.MessagingOperationName("process"),
				semconv.MessagingMessageID(job.ID),
				semconv.MessagingMessageBodySize(len(job.Payload)),
				AttemptKey.Int(job.Attempt),
			),
		}
		if producer.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: producer}))
			if t.child {
				ctx = trace.ContextWithRemoteSpanContext(ctx, producer)
			}
		}
		ctx, span := t.tracer.Start(ctx, "process "+job.Topic, opts...)
		defer func() {
			if v := recover(); v != nil {
				span.SetStatus(codes.Error, fmt.Sprintf("panic: %v", v))
				span.End()
				panic(v) // the queue turns it into a failed run
			}
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}()
		return h.HandleJob(ctx, job)
	})
}
