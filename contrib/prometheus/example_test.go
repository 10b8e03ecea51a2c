package wheelqprom_test

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wheelq/wheelq"
	wheelqprom "github.com/wheelq/wheelq/contrib/prometheus"
	"github.com/wheelq/wheelq/internal/redistest"
)

// The collector is the queue's Observer and a prometheus.Collector; serve
// the registry with promhttp.Handler (or promhttp.HandlerFor) on /metrics.
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

	m := wheelqprom.New(wheelqprom.Options{})
	q, err := wheelq.New(rdb, wheelq.Config{Observer: m})
	if err != nil {
		panic(err)
	}
	m.Watch(q)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

	done := make(chan struct{})
	_ = q.Handle("ping", wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error { close(done); return nil }))
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	if _, err := q.Schedule(ctx, "ping", nil); err != nil {
		panic(err)
	}
	<-done
	_ = q.Shutdown(ctx)

	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "wheelq_jobs_succeeded_total" {
			for _, m := range mf.GetMetric() {
				fmt.Printf("%s{topic=%q} %v\n", mf.GetName(), m.GetLabel()[0].GetValue(), m.GetCounter().GetValue())
			}
		}
	}
	// Output: wheelq_jobs_succeeded_total{topic="ping"} 1
}
