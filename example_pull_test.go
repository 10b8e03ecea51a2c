package wheelq_test

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/wheelq/wheelq"
)

// A consumer pulls jobs instead of registering a handler: Reserve blocks
// until a job is due and hands it over at its time; Ack finishes it, Nack
// sends it back to be retried.
func ExampleQueue_Reserve() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	q, err := wheelq.New(rdb, wheelq.Config{Backoff: func(int, error) time.Duration { return 10 * time.Millisecond }})
	if err != nil {
		panic(err)
	}
	if err := q.Pull("sms.send"); err != nil {
		panic(err)
	}
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	defer q.Shutdown(ctx)

	if _, err := q.Schedule(ctx, "sms.send", []byte("your code is 4242"), wheelq.ID("otp-1"), wheelq.After(30*time.Millisecond)); err != nil {
		panic(err)
	}
	for sent := false; !sent; {
		rs, err := q.Reserve(ctx, wheelq.ReserveOptions{Topics: []string{"sms.send"}, Max: 10, TTR: time.Minute})
		if err != nil {
			panic(err)
		}
		for _, r := range rs {
			if r.Job.Attempt == 1 {
				fmt.Printf("attempt 1 of %s: the gateway is down\n", r.ID)
				if err := q.Nack(ctx, r, wheelq.NackOptions{Err: fmt.Errorf("gateway down")}); err != nil {
					panic(err)
				}
				continue
			}
			fmt.Printf("attempt %d of %s: sent %q (last error: %s)\n", r.Job.Attempt, r.ID, r.Job.Payload, r.Job.LastError)
			if err := q.Ack(ctx, r.Receipt); err != nil {
				panic(err)
			}
			sent = true
		}
	}
	info, err := q.Lookup(ctx, "sms.send", "otp-1")
	if err != nil {
		panic(err)
	}
	fmt.Println(info.State)
	// Output:
	// attempt 1 of otp-1: the gateway is down
	// attempt 2 of otp-1: sent "your code is 4242" (last error: gateway down)
	// done
}

// A consumer that works in batches polls without waiting (NoWait), acks
// what it finished in one round trip (AckAll) and hands back at once,
// without counting an attempt, what it will not do (Release).
func ExampleQueue_AckAll() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	q, err := wheelq.New(rdb, wheelq.Config{})
	if err != nil {
		panic(err)
	}
	if err := q.Pull("thumbs"); err != nil {
		panic(err)
	}
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	defer q.Shutdown(ctx)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := q.Schedule(ctx, "thumbs", []byte(id), wheelq.ID(id)); err != nil {
			panic(err)
		}
	}
	var rs []*wheelq.Reservation
	for len(rs) < 3 {
		got, err := q.Reserve(ctx, wheelq.ReserveOptions{Topics: []string{"thumbs"}, Max: 3, NoWait: true})
		if err != nil {
			panic(err)
		}
		rs = append(rs, got...)
		if len(got) == 0 {
			time.Sleep(time.Millisecond) // nothing ready: poll again (a real consumer does other work)
		}
	}
	// Jobs due at the same time may come in any order.
	sort.Slice(rs, func(i, j int) bool { return rs[i].ID < rs[j].ID })
	errs := q.AckAll(ctx, rs[0].Receipt, rs[1].Receipt)
	fmt.Println("acked:", errs[0] == nil, errs[1] == nil)
	if err := q.Release(ctx, rs[2]); err != nil {
		panic(err)
	}
	again, err := q.Reserve(ctx, wheelq.ReserveOptions{Topics: []string{"thumbs"}})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s again, attempt %d\n", again[0].ID, again[0].Job.Attempt)
	// Output:
	// acked: true true
	// c again, attempt 1
}

// A consumer that may lose a job to its own crash (a cache refresh, a
// best-effort notification) pops due jobs: each is finished in the same
// Redis call that takes it, so there is nothing to ack.
func ExampleQueue_Pop() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	q, err := wheelq.New(rdb, wheelq.Config{})
	if err != nil {
		panic(err)
	}
	if err := q.Pull("cache.refresh"); err != nil {
		panic(err)
	}
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	defer q.Shutdown(ctx)
	for _, id := range []string{"home", "prices"} {
		if _, err := q.Schedule(ctx, "cache.refresh", []byte(id), wheelq.ID(id), wheelq.After(20*time.Millisecond)); err != nil {
			panic(err)
		}
	}
	var ids []string
	for len(ids) < 2 {
		js, err := q.Pop(ctx, []string{"cache.refresh"}, 10)
		if err != nil {
			panic(err)
		}
		for _, j := range js {
			ids = append(ids, j.ID)
		}
		if len(js) == 0 {
			time.Sleep(time.Millisecond) // nothing due yet: poll again
		}
	}
	sort.Strings(ids)
	info, err := q.Lookup(ctx, "cache.refresh", "home")
	if err != nil {
		panic(err)
	}
	fmt.Println(ids, info.State)
	// Output:
	// [home prices] done
}
