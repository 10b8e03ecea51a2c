package wheelq_test

import (
	"context"
	"fmt"
	"time"

	"github.com/wheelq/wheelq"
)

// List pages through the stored jobs in due order across all partitions,
// by topic, state and due window; Counts gives the figures per topic. Any
// process can inspect a namespace, started or not.
func ExampleQueue_List() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	q, err := wheelq.New(rdb, wheelq.Config{Namespace: "example-list"})
	if err != nil {
		panic(err)
	}
	defer q.Shutdown(ctx)
	for _, j := range []struct {
		topic, id string
		in        time.Duration
	}{{"orders", "o-1", 3 * time.Hour}, {"orders", "o-2", time.Hour}, {"mail", "m-1", 2 * time.Hour}} {
		if _, err := q.Schedule(ctx, j.topic, nil, wheelq.ID(j.id), wheelq.After(j.in)); err != nil {
			panic(err)
		}
	}

	for cursor, page := "", 1; ; page++ {
		jobs, next, err := q.List(ctx, wheelq.JobFilter{}, cursor, 2)
		if err != nil {
			panic(err)
		}
		fmt.Print("page ", page, ":")
		for _, j := range jobs {
			fmt.Print(" ", j.Topic, "/", j.ID, " (", j.State, ")")
		}
		fmt.Println()
		if next == "" {
			break
		}
		cursor = next
	}
	orders, _, err := q.List(ctx, wheelq.JobFilter{Topic: "orders", DueBefore: time.Now().Add(2 * time.Hour)}, "", 10)
	if err != nil {
		panic(err)
	}
	fmt.Println("orders due within 2h:", len(orders), orders[0].ID)
	counts, err := q.Counts(ctx)
	if err != nil {
		panic(err)
	}
	for _, c := range counts {
		fmt.Printf("%s: %d pending, %d overdue, %d dead\n", c.Topic, c.Pending, c.Overdue, c.Dead)
	}
	// Output:
	// page 1: orders/o-2 (pending) mail/m-1 (pending)
	// page 2: orders/o-1 (pending)
	// orders due within 2h: 1 o-2
	// mail: 1 pending, 0 overdue, 0 dead
	// orders: 2 pending, 0 overdue, 0 dead
}

// Pause holds a topic's jobs in every process of the namespace (they stay
// pending in Redis) while other topics run; Resume runs them, oldest
// first.
func ExampleQueue_Pause() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	q, err := wheelq.New(rdb, wheelq.Config{Namespace: "example-pause"})
	if err != nil {
		panic(err)
	}
	ran := make(chan string)
	for _, topic := range []string{"mail", "orders"} {
		q.Handle(topic, wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
			ran <- j.Topic + "/" + j.ID
			return nil
		}))
	}
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	defer q.Shutdown(ctx)

	if err := q.Pause(ctx, "mail"); err != nil { // the mail server is down for a while
		panic(err)
	}
	if _, err := q.Schedule(ctx, "mail", []byte("hello"), wheelq.ID("m-1")); err != nil {
		panic(err)
	}
	if _, err := q.Schedule(ctx, "orders", nil, wheelq.ID("o-1")); err != nil {
		panic(err)
	}
	fmt.Println("ran", <-ran)
	paused, _ := q.Paused(ctx)
	fmt.Println("paused:", paused)

	if err := q.Resume(ctx, "mail"); err != nil {
		panic(err)
	}
	fmt.Println("ran", <-ran)
	// Output:
	// ran orders/o-1
	// paused: [mail]
	// ran mail/m-1
}
